# daemon/engine/local.mk - the engine: the model file (gguf.c, model.c,
# weights.c), devices and the parallel plan (plan.c, plan_print.c), the
# forward pass (block.c, forward.c, jobs.c, comms.c), the KV cache, the
# tokenizer, chat templates, sampling, grammars (grammar.c, constrain.c)
# and the serving loop (engine.c,
# generate.c).  The backends come through the registry (kernels/registry.h):
# the engine names none of them and is compiled the same with or without
# CUDA.
noinst_LTLIBRARIES += daemon/engine/libpgengine.la
daemon_engine_libpgengine_la_SOURCES = \
	daemon/engine/block.c \
	daemon/engine/chat.c \
	daemon/engine/chat.h \
	daemon/engine/comms.c \
	daemon/engine/constrain.c \
	daemon/engine/constrain.h \
	daemon/engine/engine.c \
	daemon/engine/engine.h \
	daemon/engine/fault.c \
	daemon/engine/fault.h \
	daemon/engine/forward.c \
	daemon/engine/forward.h \
	daemon/engine/forward_impl.h \
	daemon/engine/generate.c \
	daemon/engine/generate.h \
	daemon/engine/grammar.c \
	daemon/engine/grammar.h \
	daemon/engine/gguf.c \
	daemon/engine/gguf.h \
	daemon/engine/jobs.c \
	daemon/engine/kv.c \
	daemon/engine/kv.h \
	daemon/engine/kvcache.c \
	daemon/engine/kvcache.h \
	daemon/engine/model.c \
	daemon/engine/model.h \
	daemon/engine/plan.c \
	daemon/engine/plan.h \
	daemon/engine/plan_impl.h \
	daemon/engine/plan_print.c \
	daemon/engine/sampler.c \
	daemon/engine/sampler.h \
	daemon/engine/stepcost.c \
	daemon/engine/stepcost.h \
	daemon/engine/tokenizer.c \
	daemon/engine/tokenizer.h \
	daemon/engine/weights.c
daemon_engine_libpgengine_la_CFLAGS = $(AM_CFLAGS) $(PCRE2_CFLAGS) $(NUMA_CFLAGS)
daemon_engine_libpgengine_la_LIBADD = kernels/libpgregistry.la $(PCRE2_LIBS) $(NUMA_LIBS)

# What a test or a tool links to use the engine.
ENGINE_LIBS = daemon/engine/libpgengine.la
