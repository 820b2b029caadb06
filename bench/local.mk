# bench/local.mk - benchmarks: built with the tree, run by hand (bench/README)
# or by their driver scripts, never by make check.
#   decode:   decode speed on a model (bench/decode)
#   gpu:      bench/gpu's program; without the CUDA backend it only says so
#             (bench/gpu, tests/gpu/run)
#   grammar:  (bench/grammar, a script) a JSON-schema-constrained batch of
#             16 against the same batch unconstrained; grammar-compile
#             times schemas' translation and compilation
#   http:     (bench/http, a script) pagoda-http + pagodad against
#             llama-server's HTTP; bench/llama_server.py builds and runs
#             llama-server for it and bench/serve
#   ipc:      a ping through pagodad's rings (polling, asleep) against a
#             Unix socket, bare rings, and token delivery to 64 streaming
#             clients; bench/ipc starts the daemon and drives it
#   kernels:  the CPU kernels;  window: sliding-window attention against
#             the whole context
#   parallel: parallel plans (PP, TP, PP x TP, CP) on CPU devices against
#             one device; bench/parallel generates its larger model with
#             gguf-gen
#   serve:    the serving engine under load (bench/serve); serve-daemon:
#             the same load through pagodad and libpagoda
noinst_PROGRAMS += \
	bench/decode-pagoda \
	bench/gpu-pagoda \
	bench/grammar-compile \
	bench/ipc-pagoda \
	bench/kernels \
	bench/parallel-pagoda \
	bench/serve-daemon \
	bench/serve-pagoda \
	bench/window
bench_decode_pagoda_SOURCES = bench/decode-pagoda.c
bench_decode_pagoda_LDADD = daemon/engine/libpgengine.la
bench_gpu_pagoda_SOURCES = bench/gpu-pagoda.c
bench_gpu_pagoda_CPPFLAGS = $(AM_CPPFLAGS)
bench_gpu_pagoda_LDADD = daemon/engine/libpgengine.la
if HAVE_CUDA
bench_gpu_pagoda_CPPFLAGS += $(CUDA_CFLAGS) -DHAVE_CUDA
bench_gpu_pagoda_LDADD += kernels/libpgcuda.la $(CUDA_LIBS)
endif
bench_grammar_compile_SOURCES = bench/grammar-compile.c
bench_grammar_compile_LDADD = daemon/libpagodad.la
bench_ipc_pagoda_SOURCES = bench/ipc-pagoda.c
bench_ipc_pagoda_LDADD = client/libpagoda.la
bench_kernels_SOURCES = bench/kernels.c
bench_kernels_LDADD = kernels/libpgkernels.la
bench_parallel_pagoda_SOURCES = bench/parallel-pagoda.c
bench_parallel_pagoda_LDADD = daemon/engine/libpgengine.la
bench_serve_daemon_SOURCES = bench/serve-daemon.c
bench_serve_daemon_LDADD = client/libpagoda.la
bench_serve_pagoda_SOURCES = bench/serve-pagoda.c
bench_serve_pagoda_LDADD = daemon/engine/libpgengine.la
bench_window_SOURCES = bench/window.c
bench_window_LDADD = kernels/libpgkernels.la
EXTRA_DIST += \
	bench/README \
	bench/decode \
	bench/gpu \
	bench/grammar \
	bench/http \
	bench/ipc \
	bench/llama_server.py \
	bench/parallel \
	bench/readbw.h \
	bench/serve
