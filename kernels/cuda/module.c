/*
 * module.c - pagoda-cuda.so's entry point (module.h): the CUDA backend's
 * and NCCL's functions in one struct that kernels/registry.c looks up
 * after dlopen().
 */
#include "kernels/cuda/module.h"
#ifdef HAVE_NCCL
#include "kernels/cuda/comm_nccl.h"

/* pg_comm_nccl_join on the backend's own stream. */
static int nccl_join(int size, int rank, const void *id,
		     struct pg_backend *be, int cuda_device,
		     const atomic_int *cancel, int64_t deadline_ns,
		     struct pg_comm **out, char *err, size_t err_len)
{
	const struct pg_comm_nccl_wait w = {
		.cancel = cancel,
		.deadline_ns = deadline_ns,
	};

	return pg_comm_nccl_join(size, rank, id, cuda_device,
				 pg_cuda_backend_stream(be), &w, out, err,
				 err_len);
}
#endif

/* Looked up by name (PG_CUDA_MODULE_SYMBOL): the module's only export. */
extern const struct pg_cuda_module pg_cuda_module_v1;
const struct pg_cuda_module pg_cuda_module_v1 = {
	.abi = PG_CUDA_MODULE_ABI,
	.device_count = pg_cuda_device_count,
	.device_info = pg_cuda_device_info,
	.backend_create = pg_cuda_backend_create,
#ifdef HAVE_NCCL
	.nccl_id_bytes = PG_COMM_NCCL_ID_BYTES,
	.nccl_unique_id = pg_comm_nccl_unique_id,
	.nccl_join = nccl_join,
#endif
};
