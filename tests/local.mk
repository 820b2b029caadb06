# tests/local.mk - make check: the harness, then every test, grouped by the
# folder it tests in the order of the top Makefile.am.  The tests live in
# tests/ and share its harness (tests/lib.sh, tests/check.h, the GGUF
# generator in tests/gen/), so they are listed here rather than beside
# the code they test; each group says which folder it is for.
TEST_EXTENSIONS = .sh
SH_LOG_COMPILER = $(SHELL)
AM_TESTS_ENVIRONMENT = \
	top_srcdir='$(top_srcdir)'; export top_srcdir; \
	top_builddir='$(top_builddir)'; export top_builddir; \
	PAGODA_MODULE_DIR='$(abs_top_builddir)/kernels/.libs'; \
	export PAGODA_MODULE_DIR;
if SANITIZERS
# Tests that the plain build already runs and that take far too long under
# ASan (tests/golden-run.sh's numerics checks) skip on seeing this.
AM_TESTS_ENVIRONMENT += PAGODA_SANITIZERS=1; export PAGODA_SANITIZERS;
endif
EXTRA_DIST += \
	tests/check.h \
	tests/lib.sh

# ---- kernels/ ----
# The backend registry: without CUDA it refuses cuda: with a clear error;
# in a build that makes the CUDA module, the module must load (every
# symbol resolved), GPU or not.
check_PROGRAMS += tests/test_registry
TESTS += tests/test_registry
tests_test_registry_SOURCES = tests/test_registry.c
tests_test_registry_CPPFLAGS = $(AM_CPPFLAGS)
tests_test_registry_LDADD = kernels/libpgregistry.la -lpthread
if HAVE_CUDA
tests_test_registry_CPPFLAGS += -DHAVE_CUDA
endif

# kernels/cpu/: quantization, every kernel table, the shared-memory
# communicator; test_kernels forced to each table (PAGODA_CPU_KERNELS),
# and pagodad too.
check_PROGRAMS += tests/test_comm tests/test_kernels tests/test_quant
TESTS += tests/test_comm tests/test_kernels tests/test_quant
tests_test_comm_SOURCES = tests/test_comm.c
tests_test_comm_LDADD = kernels/libpgkernels.la -lpthread
tests_test_kernels_SOURCES = tests/test_kernels.c
tests_test_kernels_LDADD = kernels/libpgkernels.la
tests_test_quant_SOURCES = tests/test_quant.c
tests_test_quant_LDADD = kernels/libpgkernels.la
TESTS += tests/test-kernels-tables.sh
EXTRA_DIST += tests/test-kernels-tables.sh

# Every backend op on every present backend against the scalar CPU one
# (skips, 77, after the CPU SIMD part when no GPU is there); the CUDA side
# of it is built where the CUDA backend is.
check_PROGRAMS += tests/test_backend_ops
TESTS += tests/test_backend_ops
tests_test_backend_ops_SOURCES = tests/test_backend_ops.c
tests_test_backend_ops_CPPFLAGS = $(AM_CPPFLAGS)
tests_test_backend_ops_LDADD = kernels/libpgkernels.la -lm
if HAVE_CUDA
tests_test_backend_ops_CPPFLAGS += $(CUDA_CFLAGS) -DHAVE_CUDA
tests_test_backend_ops_LDADD += kernels/libpgcuda.la
endif

# kernels/cuda/: NCCL between GPUs (links everywhere NCCL is; skips, 77,
# without a GPU), and the default model's greedy text on cuda:0 against
# cpu:0 through pagodad (skips without the model, a CUDA build or a GPU).
if HAVE_NCCL
check_PROGRAMS += tests/test_comm_nccl
TESTS += tests/test_comm_nccl
tests_test_comm_nccl_SOURCES = tests/test_comm_nccl.c
tests_test_comm_nccl_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CFLAGS)
tests_test_comm_nccl_LDADD = kernels/libpgnccl.la $(CUDA_LIBS) -lnccl -lpthread
endif
TESTS += tests/test-cuda-e2e.sh
# tests/gpu/run builds and runs the GPU tests on a machine with one.
EXTRA_DIST += \
	tests/gpu/run \
	tests/gpu/stage-model \
	tests/test-cuda-e2e.sh

# ---- daemon/engine/ ----
# The GGUF reader, and its fuzz target: a corpus replay with bounded
# mutations in make check, and a libFuzzer build with clang when it is
# there.
check_PROGRAMS += tests/test_gguf
TESTS += tests/test_gguf
tests_test_gguf_SOURCES = \
	tests/gguf_build.h \
	tests/test_gguf.c
tests_test_gguf_LDADD = $(ENGINE_LIBS)

check_PROGRAMS += tests/fuzz_gguf
TESTS += tests/fuzz-gguf.sh
tests_fuzz_gguf_SOURCES = tests/fuzz_gguf.c
tests_fuzz_gguf_LDADD = $(ENGINE_LIBS)
EXTRA_DIST += \
	tests/fuzz-gguf.sh \
	tests/fuzz/corpus \
	tests/fuzz/mkseeds.py \
	tests/fuzz/run-libfuzzer
FUZZ_SRCS = $(srcdir)/tests/fuzz_gguf.c $(srcdir)/daemon/engine/gguf.c $(srcdir)/kernels/cpu/dtype.c
if HAVE_LIBFUZZER
check_SCRIPTS += tests/fuzz/fuzz-gguf-libfuzzer
tests/fuzz/fuzz-gguf-libfuzzer: $(FUZZ_SRCS)
	@$(MKDIR_P) tests/fuzz
	$(AM_V_CC)$(FUZZ_CC) -g -O1 -std=gnu11 -D_GNU_SOURCE -DPAGODA_LIBFUZZER \
		-fsanitize=fuzzer,address,undefined -I$(top_srcdir) -I$(top_builddir) \
		$(FUZZ_SRCS) -o $@
fuzz-gguf: tests/fuzz/fuzz-gguf-libfuzzer
CLEANFILES += tests/fuzz/fuzz-gguf-libfuzzer
endif

# The loader, the forward pass, the parallel plans (PP, TP, CP) on CPU
# devices against one device (test_parallel also runs the serving engine's
# tests under a PP 2 x TP 2 plan), devices and the plan on generated
# models, the serving engine, the KV cache, the sampler and the generator
# itself.
check_PROGRAMS += \
	tests/test_engine \
	tests/test_forward \
	tests/test_ggufgen \
	tests/test_kvcache \
	tests/test_model \
	tests/test_parallel \
	tests/test_plan \
	tests/test_sampler
TESTS += \
	tests/test_engine \
	tests/test_forward \
	tests/test_ggufgen \
	tests/test_kvcache \
	tests/test_model \
	tests/test_parallel \
	tests/test_plan \
	tests/test_sampler
tests_test_engine_SOURCES = tests/test_engine.c
tests_test_engine_LDADD = tests/gen/libggufgen.la $(ENGINE_LIBS)
tests_test_forward_SOURCES = tests/test_forward.c
tests_test_forward_LDADD = tests/gen/libggufgen.la $(ENGINE_LIBS)
tests_test_ggufgen_SOURCES = tests/test_ggufgen.c
tests_test_ggufgen_LDADD = tests/gen/libggufgen.la $(ENGINE_LIBS)
tests_test_kvcache_SOURCES = tests/test_kvcache.c
tests_test_kvcache_LDADD = $(ENGINE_LIBS)
tests_test_model_SOURCES = tests/test_model.c
tests_test_model_LDADD = tests/gen/libggufgen.la $(ENGINE_LIBS)
tests_test_parallel_SOURCES = tests/test_parallel.c
tests_test_parallel_LDADD = tests/gen/libggufgen.la $(ENGINE_LIBS)
tests_test_plan_SOURCES = tests/test_plan.c
tests_test_plan_LDADD = tests/gen/libggufgen.la $(ENGINE_LIBS)
tests_test_sampler_SOURCES = tests/test_sampler.c
tests_test_sampler_LDADD = $(ENGINE_LIBS)
TESTS += tests/test-engine-plan.sh tests/test-engine-replicas.sh
EXTRA_DIST += tests/test-engine-plan.sh tests/test-engine-replicas.sh

# Structured output: the grammar engine (GBNF, masks, caches; SmolLM2's
# vocabulary when the default model is there) and JSON Schema into GBNF.
check_PROGRAMS += tests/test_grammar tests/test_schema
TESTS += tests/test_grammar tests/test_schema
tests_test_grammar_SOURCES = tests/test_grammar.c
tests_test_grammar_LDADD = $(ENGINE_LIBS)
tests_test_schema_SOURCES = tests/test_schema.c
tests_test_schema_CPPFLAGS = $(AM_CPPFLAGS) $(JANSSON_CFLAGS)
tests_test_schema_LDADD = daemon/libpagodad.la
# twenty real-world schemas: test_schema, the sampling test, bench/grammar
EXTRA_DIST += \
	tests/data/schemas/address.json \
	tests/data/schemas/app_config.json \
	tests/data/schemas/calendar_event.json \
	tests/data/schemas/chess_move.json \
	tests/data/schemas/contact_card.json \
	tests/data/schemas/entity_extraction.json \
	tests/data/schemas/feature_flags.json \
	tests/data/schemas/geo_point.json \
	tests/data/schemas/github_issue.json \
	tests/data/schemas/jsonrpc_request.json \
	tests/data/schemas/order.json \
	tests/data/schemas/product.json \
	tests/data/schemas/rating.json \
	tests/data/schemas/recipe.json \
	tests/data/schemas/search_query.json \
	tests/data/schemas/sentiment.json \
	tests/data/schemas/shape.json \
	tests/data/schemas/todo_list.json \
	tests/data/schemas/tree.json \
	tests/data/schemas/weather_tool_args.json

# The tokenizers and chat templates against llama.cpp's (Gemma 3's
# SentencePiece vocabulary skips without the file), and every vocabulary.
check_PROGRAMS += \
	tests/test_chat \
	tests/test_tokenizer \
	tests/test_tokenizer_gemma \
	tests/test_vocabs
TESTS += \
	tests/test_chat \
	tests/test_tokenizer \
	tests/test_tokenizer_gemma \
	tests/test_vocabs
tests_test_chat_SOURCES = \
	tests/test_chat.c \
	tests/vocab_util.h
tests_test_chat_LDADD = $(ENGINE_LIBS)
tests_test_tokenizer_SOURCES = \
	tests/test_tokenizer.c \
	tests/vocab_util.h
tests_test_tokenizer_LDADD = $(ENGINE_LIBS) -lpthread
tests_test_tokenizer_gemma_SOURCES = \
	tests/test_tokenizer_gemma.c \
	tests/vocab_util.h
tests_test_tokenizer_gemma_LDADD = $(ENGINE_LIBS)
tests_test_vocabs_SOURCES = tests/test_vocabs.c
tests_test_vocabs_LDADD = $(ENGINE_LIBS)
EXTRA_DIST += \
	tests/data/tokenizer-gemma3.txt \
	tests/data/tokenizer-smollm2.txt \
	tests/ref/gen-tokenizer-gemma-ref.py \
	tests/ref/gen-tokenizer-ref.py

# llama.cpp's numerics against its stored logits on generated models, and
# against its stored answers on the default model (skips without it); the
# same checks (pagoda's numerics) on Gemma 3 270M (skips without it).
# tests/test-golden-requant.sh runs them on scripts/requantize's K-quant
# copies of the default model; it is not in TESTS yet (docs/architecture.md,
# "Agreement with llama.cpp", has its figures): after scripts/requantize,
#   make check TESTS=tests/test-golden-requant.sh
check_PROGRAMS += tests/test_golden tests/test_numerics
TESTS += tests/test_golden tests/test_numerics
tests_test_golden_SOURCES = tests/test_golden.c
tests_test_golden_LDADD = $(ENGINE_LIBS)
tests_test_numerics_SOURCES = tests/test_numerics.c
tests_test_numerics_LDADD = tests/gen/libggufgen.la $(ENGINE_LIBS)
TESTS += tests/test-golden-gemma3.sh
EXTRA_DIST += \
	tests/data/arch-numerics.txt \
	tests/data/golden-gemma3.txt \
	tests/data/golden-smollm2-q3_k_m.txt \
	tests/data/golden-smollm2-q4_k_m.txt \
	tests/data/golden-smollm2-q5_k_m.txt \
	tests/data/golden-smollm2-q6_k.txt \
	tests/data/golden-smollm2.txt \
	tests/data/llama-numerics.txt \
	tests/golden-run.sh \
	tests/ref/gen-model-ref.py \
	tests/ref/gen-numerics-ref.py \
	tests/ref/llama-self-check.py \
	tests/test-golden-gemma3.sh \
	tests/test-golden-requant.sh

# ---- daemon/ ----
# pagodad's command line end to end on a generated model; pagodad.conf and
# the options over it; a real daemon against raw clients written over
# wire/ and shm/ (daemon_client); allocation failure injection against a
# live daemon.
TESTS += \
	tests/test-config.sh \
	tests/test-daemon.sh \
	tests/test-faults.sh \
	tests/test-pagodad.sh
EXTRA_DIST += \
	tests/test-config.sh \
	tests/test-daemon.sh \
	tests/test-faults.sh \
	tests/test-pagodad.sh
check_PROGRAMS += tests/daemon_client tests/test_faults
tests_daemon_client_SOURCES = \
	shm/ring.h \
	shm/segment.h \
	tests/daemon_client.c \
	wire/client_proto.h
tests_daemon_client_LDADD = -lpthread
tests_test_faults_SOURCES = tests/test_faults.c
tests_test_faults_LDADD = client/libpagoda.la

# The daemon's library in-process (tests/pgd_fixture.h): crafted requests
# (request.c) and hostile segments (session.c) on a generated tiny model,
# test_request catching what reaches the engine with ld's --wrap; the table
# of settings (daemon/settings.h) against --help, --print-config and the
# options.
check_PROGRAMS += tests/test_request tests/test_segment tests/test_settings
TESTS += tests/test_request tests/test_segment tests/test_settings
tests_test_request_SOURCES = \
	tests/pgd_fixture.h \
	tests/test_request.c
tests_test_request_CPPFLAGS = $(AM_CPPFLAGS) $(URING_CFLAGS)
tests_test_request_LDFLAGS = -Wl,--wrap=pg_engine_submit
tests_test_request_LDADD = tests/gen/libggufgen.la daemon/libpagodad.la
tests_test_segment_SOURCES = \
	tests/pgd_fixture.h \
	tests/test_segment.c
tests_test_segment_CPPFLAGS = $(AM_CPPFLAGS) $(URING_CFLAGS)
tests_test_segment_LDADD = tests/gen/libggufgen.la daemon/libpagodad.la
tests_test_settings_SOURCES = tests/test_settings.c
tests_test_settings_CPPFLAGS = $(AM_CPPFLAGS)
tests_test_settings_LDADD = daemon/libpagodad.la

# ---- shm/ ----
# The rings, arenas and segment checks under stress, and the same test
# under ThreadSanitizer: its own flags replace AM_CFLAGS/AM_LDFLAGS, so an
# ASan build (--enable-sanitizers) does not mix the two.  GCC's TSan does
# not see the memcpy it expands inline (the test reads entries and
# payloads with memcpy): -fno-builtin-memcpy sends them to the checked one.
check_PROGRAMS += tests/test_ring tests/test_ring_tsan
TESTS += tests/test_ring tests/test-ring-tsan.sh
tests_test_ring_SOURCES = tests/test_ring.c
tests_test_ring_tsan_SOURCES = tests/test_ring.c
tests_test_ring_tsan_CFLAGS = -std=gnu11 $(WARN_CFLAGS) -Wno-tsan -fno-builtin-memcpy \
	-O1 -g -fsanitize=thread
tests_test_ring_tsan_LDFLAGS = -fsanitize=thread
EXTRA_DIST += tests/test-ring-tsan.sh

# ---- common/ ----
# How strings a client chose are shown (common/escape.h), every mode.
check_PROGRAMS += tests/test_escape
TESTS += tests/test_escape
tests_test_escape_SOURCES = \
	common/escape.h \
	tests/check.h \
	tests/test_escape.c

# ---- client/ ----
# libpagoda against a fake daemon in the test (no model, no pagodad), and
# end to end against a real pagodad (skips until it serves).
check_PROGRAMS += tests/test_libpagoda
TESTS += tests/test_libpagoda tests/test-client.sh
tests_test_libpagoda_SOURCES = tests/test_libpagoda.c
tests_test_libpagoda_LDADD = client/libpagoda.la -lpthread
EXTRA_DIST += tests/test-client.sh

# The Python binding (python/) under pytest against a real pagodad with
# the default model (skips without it, python3, or in a sanitizer build).
TESTS += tests/test-python.sh
EXTRA_DIST += \
	python/README.md \
	python/pagoda/__init__.py \
	python/pagoda/_client.py \
	python/pagoda/_lib.py \
	python/pagoda/py.typed \
	python/pyproject.toml \
	tests/python/conftest.py \
	tests/python/test_binding.py \
	tests/python/test_structured.py \
	tests/test-python.sh

# pagoda-http (http/): the OpenAI-compatible gateway under pytest with the
# openai package (tests/http/), against a real pagodad with the default
# model (skips when pagoda-http is not built, without python3 or the model).
TESTS += tests/test-http.sh
EXTRA_DIST += \
	tests/http/test_openai.py \
	tests/http/test_tools.py \
	tests/test-http.sh
# Its tool calls without a model: grammars, the reader, refusals.
if HAVE_HTTP
check_PROGRAMS += tests/test_tools
TESTS += tests/test_tools
endif
tests_test_tools_SOURCES = tests/test_tools.c http/tools.c http/buf.c http/http.h \
	daemon/schema.c daemon/schema.h
tests_test_tools_CPPFLAGS = $(AM_CPPFLAGS) $(MHD_CFLAGS) $(JANSSON_CFLAGS)
tests_test_tools_LDADD = $(ENGINE_LIBS) $(JANSSON_LIBS)

# pagodactl: statistics exact under a scripted load, metrics, evict, drain,
# resume, clients, health, stats reset, a non-admin user refused (as root)
# and kept from the per-client table, and a client with escapes in its
# name (ctl_named_client).
check_PROGRAMS += tests/ctl_named_client
TESTS += tests/test-ctl.sh
tests_ctl_named_client_SOURCES = tests/ctl_named_client.c
tests_ctl_named_client_LDADD = client/libpagoda.la
EXTRA_DIST += tests/test-ctl.sh

# ---- man/, systemd/ ----
# The notifications, the journal's prefixes, W^X and the system calls
# without systemd; the unit with systemd-analyze (and under systemd where
# it runs); the man pages against the header, the --help texts and the
# configuration.
check_PROGRAMS += tests/mdwe_exec tests/notify_sink
TESTS += tests/test-man.sh tests/test-notify.sh tests/test-systemd.sh
tests_mdwe_exec_SOURCES = tests/mdwe_exec.c
tests_notify_sink_SOURCES = tests/notify_sink.c
EXTRA_DIST += \
	tests/test-man.sh \
	tests/test-notify.sh \
	tests/test-systemd.sh
