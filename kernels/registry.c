/*
 * registry.c - the backends and communicators of this build, opened by
 * kind (registry.h).  The only file outside kernels/cpu and kernels/cuda
 * that names their constructors, and the only one that asks which of
 * them were built.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "registry.h"
#include "cpu/comm_shm.h"
#ifdef HAVE_CUDA_BACKEND
#include "cuda/backend_cuda.h"
#endif
#ifdef HAVE_NCCL_COMM
#include "cuda/comm_nccl.h"
_Static_assert(PG_DEVICE_GROUP_ID_BYTES == PG_COMM_NCCL_ID_BYTES,
	       "a device group's id is an NCCL unique id");
#endif

#define NO_CUDA "this pagodad was built without CUDA; rebuild with ./configure --with-cuda"

static int open_cpu(const struct pg_backend_spec *s, struct pg_backend **out,
		    char *err, size_t err_len)
{
	struct pg_backend *be;
	int rc;

	if (s->llama_numerics && pg_cpu_isa_best() < PG_ISA_AVX2) {
		snprintf(err, err_len, "llama.cpp numerics need a CPU with AVX2, FMA and F16C (they reproduce llama.cpp's AVX2 build); this one has only %s%s",
			 pg_cpu_isa_name(pg_cpu_isa_best()),
			 pg_cpu_isa_hw() != pg_cpu_isa_best() ?
			 " (" PG_CPU_KERNELS_ENV " says so: unset it or set avx2)" : "");
		return -ENOTSUP;
	}
	be = pg_cpu_backend_create(s->n_threads, s->isa);
	if (!be) {
		rc = -errno;
		if (pg_cpu_isa_forced(NULL, err, err_len) < 0)
			return -EINVAL;	/* PAGODA_CPU_KERNELS: err says why */
		snprintf(err, err_len, "cannot start the CPU backend with %d threads: %s",
			 s->n_threads, strerror(-rc));
		return rc;
	}
	pg_cpu_backend_llama_numerics(be, s->llama_numerics);
	if (s->cpus && s->n_cpus > 0)
		pg_cpu_backend_pin(be, s->cpus, s->n_cpus);
	*out = be;
	return 0;
}

int pg_backend_open(const struct pg_backend_spec *spec,
		    struct pg_backend **out, char *err, size_t err_len)
{
	*out = NULL;
	switch (spec->kind) {
	case PG_BACKEND_CPU:
		return open_cpu(spec, out, err, err_len);
	case PG_BACKEND_CUDA:
#ifdef HAVE_CUDA_BACKEND
		*out = pg_cuda_backend_create(spec->index, err, err_len);
		return *out ? 0 : -ENODEV;
#else
		snprintf(err, err_len, NO_CUDA);
		return -ENOTSUP;
#endif
	}
	snprintf(err, err_len, "no such kind of backend (%d)", (int)spec->kind);
	return -EINVAL;
}

int pg_backend_built(enum pg_backend_kind k)
{
#ifdef HAVE_CUDA_BACKEND
	return k == PG_BACKEND_CPU || k == PG_BACKEND_CUDA;
#else
	return k == PG_BACKEND_CPU;
#endif
}

int pg_gpu_count(void)
{
#ifdef HAVE_CUDA_BACKEND
	return pg_cuda_device_count();
#else
	return 0;
#endif
}

int pg_gpu_info(int index, struct pg_gpu_info *out, char *err,
		size_t err_len)
{
#ifdef HAVE_CUDA_BACKEND
	struct pg_cuda_device_info info;
	int rc = pg_cuda_device_info(index, &info, err, err_len);

	if (rc)
		return rc;
	memset(out, 0, sizeof(*out));
	snprintf(out->name, sizeof(out->name), "%s", info.name);
	out->total_bytes = info.total_bytes;
	out->free_bytes = info.free_bytes;
	return 0;
#else
	(void)index;
	(void)out;
	snprintf(err, err_len, NO_CUDA);
	return -ENOTSUP;
#endif
}

/* ---- host groups: shared memory between the threads of this process ---- */

/* A host group is comm_shm's group: the registry only names it. */
int pg_host_group_create(int size, struct pg_host_group **out)
{
	return pg_comm_shm_group_create(size, (struct pg_comm_shm_group **)out);
}

struct pg_comm *pg_host_group_join(struct pg_host_group *g, int rank)
{
	return pg_comm_shm_join((struct pg_comm_shm_group *)g, rank);
}

void pg_host_group_set_spin(struct pg_host_group *g, int64_t spin_ns)
{
	pg_comm_shm_group_set_spin((struct pg_comm_shm_group *)g, spin_ns);
}

void pg_host_group_destroy(struct pg_host_group *g)
{
	pg_comm_shm_group_destroy((struct pg_comm_shm_group *)g);
}

/* ---- device groups: NCCL between GPUs ---- */

int pg_device_groups_built(void)
{
#if defined(HAVE_NCCL_COMM) && defined(HAVE_CUDA_BACKEND)
	return 1;
#else
	return 0;
#endif
}

int pg_device_group_id(void *id, size_t len, char *err, size_t err_len)
{
#ifdef HAVE_NCCL_COMM
	return pg_comm_nccl_unique_id(id, len, err, err_len);
#else
	(void)id;
	(void)len;
	snprintf(err, err_len, "this pagodad was built without NCCL; install NCCL and rebuild");
	return -ENOTSUP;
#endif
}

int pg_device_group_join(int size, int rank, const void *id,
			 struct pg_backend *be, int device_index,
			 const atomic_int *cancel, int64_t deadline_ns,
			 struct pg_comm **out, char *err, size_t err_len)
{
#if defined(HAVE_NCCL_COMM) && defined(HAVE_CUDA_BACKEND)
	const struct pg_comm_nccl_wait w = {
		.cancel = cancel,
		.deadline_ns = deadline_ns,
	};

	return pg_comm_nccl_join(size, rank, id, device_index,
				 pg_cuda_backend_stream(be), &w, out, err,
				 err_len);
#else
	(void)size, (void)rank, (void)id, (void)be, (void)device_index;
	(void)cancel, (void)deadline_ns, (void)out;
	snprintf(err, err_len, "this pagodad was built without NCCL; install NCCL and rebuild");
	return -ENOTSUP;
#endif
}
