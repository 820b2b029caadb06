# kernels/cpu/local.mk - the CPU backend, with the shared-memory
# communicator between CPU devices (comm_shm.c).
noinst_LTLIBRARIES += kernels/libpgkernels.la
kernels_libpgkernels_la_SOURCES = \
	kernels/backend.h \
	kernels/comm.h \
	kernels/cpu/add.c \
	kernels/cpu/attention.c \
	kernels/cpu/backend.c \
	kernels/cpu/comm_shm.c \
	kernels/cpu/comm_shm.h \
	kernels/cpu/cpu.h \
	kernels/cpu/cpu_impl.h \
	kernels/cpu/dot.c \
	kernels/cpu/dtype.c \
	kernels/cpu/gelu.c \
	kernels/cpu/get_rows.c \
	kernels/cpu/kv_write.c \
	kernels/cpu/llamacpp.c \
	kernels/cpu/matmul.c \
	kernels/cpu/quant.c \
	kernels/cpu/rmsnorm.c \
	kernels/cpu/rope.c \
	kernels/cpu/silu_mul.c \
	kernels/cpu/threadpool.c \
	kernels/cpu/threadpool.h \
	kernels/cpu/vec.c \
	kernels/dtype.h
kernels_libpgkernels_la_LIBADD = \
	kernels/libpgkernels_avx2.la \
	kernels/libpgkernels_avx512.la \
	kernels/libpgkernels_vnni.la

# SIMD variants are compiled with their own flags and picked at run time.
noinst_LTLIBRARIES += kernels/libpgkernels_avx2.la
kernels_libpgkernels_avx2_la_SOURCES = \
	kernels/cpu/attn_avx2.c \
	kernels/cpu/dot4x2_avx2.c \
	kernels/cpu/dot_avx2.c \
	kernels/cpu/gemm_avx2.c \
	kernels/cpu/gemm_q4.h \
	kernels/cpu/kq_avx2.c \
	kernels/cpu/q4_avx2.c \
	kernels/cpu/simd_avx2.h \
	kernels/cpu/vec_avx2.c
kernels_libpgkernels_avx2_la_CFLAGS = $(AM_CFLAGS) -mavx2 -mfma -mf16c

noinst_LTLIBRARIES += kernels/libpgkernels_avx512.la
kernels_libpgkernels_avx512_la_SOURCES = \
	kernels/cpu/vec_avx512.c
kernels_libpgkernels_avx512_la_CFLAGS = $(AM_CFLAGS) -mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl -mavx512dq

noinst_LTLIBRARIES += kernels/libpgkernels_vnni.la
kernels_libpgkernels_vnni_la_SOURCES = \
	kernels/cpu/gemm_vnni.c \
	kernels/cpu/kq_vnni.c \
	kernels/cpu/q8_vnni.c \
	kernels/cpu/vnni16.h
kernels_libpgkernels_vnni_la_CFLAGS = $(AM_CFLAGS) -mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni
