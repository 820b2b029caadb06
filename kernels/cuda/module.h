/*
 * module.h - the CUDA module's one entry point: pagoda-cuda.so, installed
 * in $(pkglibdir), holds the CUDA backend and NCCL between GPUs, and
 * kernels/registry.c dlopen()s it the first time a cuda: device is asked
 * for, so that a CPU-only run maps no CUDA library (libcudart, cuBLAS,
 * cuBLASLt and NCCL are hundreds of MB).  The registry looks up
 * PG_CUDA_MODULE_SYMBOL, a struct pg_cuda_module, and refuses one whose
 * abi is not PG_CUDA_MODULE_ABI (a module of another pagoda).
 */
#ifndef PAGODA_KERNELS_CUDA_MODULE_H
#define PAGODA_KERNELS_CUDA_MODULE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"
#include "kernels/comm.h"
#include "kernels/cuda/backend_cuda.h"

/* The file the registry loads, and the symbol it looks up in it. */
#define PG_CUDA_MODULE_FILE "pagoda-cuda.so"
#define PG_CUDA_MODULE_SYMBOL "pg_cuda_module_v1"

/* Bumped whenever this struct or a struct it passes changes. */
#define PG_CUDA_MODULE_ABI 1

/* The module's functions, as backend_cuda.h and comm_nccl.h define them. */
struct pg_cuda_module {
	int abi;			/* PG_CUDA_MODULE_ABI */
	int (*device_count)(void);
	int (*device_info)(int device, struct pg_cuda_device_info *out,
			   char *err, size_t err_len);
	struct pg_backend *(*backend_create)(int device, char *err,
					     size_t err_len);
	/* NCCL: NULL when the module was built without it */
	size_t nccl_id_bytes;
	int (*nccl_unique_id)(void *id, size_t len, char *err,
			      size_t err_len);
	int (*nccl_join)(int size, int rank, const void *id,
			 struct pg_backend *be, int cuda_device,
			 const atomic_int *cancel, int64_t deadline_ns,
			 struct pg_comm **out, char *err, size_t err_len);
};

#endif
