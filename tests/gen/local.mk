# tests/gen/local.mk - the random-weight GGUF generator: a library for tests
# and benchmarks (link it before $(ENGINE_LIBS)) and the gguf-gen command,
# built by plain make because benchmarks use it.
noinst_LTLIBRARIES += tests/gen/libggufgen.la
tests_gen_libggufgen_la_SOURCES = \
	tests/gen/ggufgen.c \
	tests/gen/ggufgen.h

noinst_PROGRAMS += tests/gen/gguf-gen
tests_gen_gguf_gen_SOURCES = tests/gen/gguf-gen.c
tests_gen_gguf_gen_LDADD = tests/gen/libggufgen.la $(ENGINE_LIBS)
