/*
 * registry.c - the backends and communicators of this build, opened by
 * kind (registry.h).  The only file outside kernels/cpu and kernels/cuda
 * that names their constructors.  The CPU's are linked in; the CUDA
 * backend and NCCL live in the CUDA module (kernels/cuda/module.h),
 * loaded with dlopen() the first time a GPU is asked for.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/registry.h"
#include "kernels/cpu/comm_shm.h"
#include "kernels/cuda/module.h"

#ifndef PG_PKGLIBDIR
#define PG_PKGLIBDIR "/usr/local/lib/pagoda"
#endif

/* ---- the CUDA module: loaded on first use ---- */

static pthread_once_t cuda_once = PTHREAD_ONCE_INIT;
static const struct pg_cuda_module *cuda;	/* NULL: not loaded */
static char cuda_why[512];			/* why not */

/*
 * The build tree's module for a program of that tree: programs sit one
 * folder below its top (daemon/pagodad, tests/..., bench/...), the module
 * in kernels/.libs.  0 when the path does not fit.
 */
static int tree_module(char *path, size_t len)
{
	char exe[4096];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	char *slash;

	if (n <= 0)
		return 0;
	exe[n] = 0;
	if (!(slash = strrchr(exe, '/')))
		return 0;
	*slash = 0;
	n = snprintf(path, len, "%s/../kernels/.libs/%s", exe,
		     PG_CUDA_MODULE_FILE);
	return n > 0 && (size_t)n < len;
}

/*
 * Load pagoda-cuda.so from $PAGODA_MODULE_DIR when it is set; else from
 * the build tree the program runs from, where there is one; else from
 * PG_PKGLIBDIR, where make install puts it.
 */
static void cuda_load(void)
{
	const char *dir = getenv(PG_MODULE_DIR_ENV);
	const struct pg_cuda_module *m;
	char path[4096];
	void *h = NULL;

	if (dir && *dir) {
		snprintf(path, sizeof(path), "%s/%s", dir, PG_CUDA_MODULE_FILE);
	} else {
		if (tree_module(path, sizeof(path)) && !access(path, R_OK))
			h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
		if (!h)
			snprintf(path, sizeof(path), "%s/%s", PG_PKGLIBDIR,
				 PG_CUDA_MODULE_FILE);
	}
	if (!h)
		h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		snprintf(cuda_why, sizeof(cuda_why), "this pagodad was built without CUDA, or its CUDA module is not installed (%.300s); rebuild with ./configure --with-cuda and make install, or set " PG_MODULE_DIR_ENV " to the folder that holds " PG_CUDA_MODULE_FILE,
			 dlerror());
		return;
	}
	m = dlsym(h, PG_CUDA_MODULE_SYMBOL);
	if (!m || m->abi != PG_CUDA_MODULE_ABI) {
		snprintf(cuda_why, sizeof(cuda_why), "%.300s is not this pagodad's CUDA module (%s); reinstall pagoda",
			 path, m ? "another version" : "no " PG_CUDA_MODULE_SYMBOL);
		dlclose(h);
		return;
	}
	cuda = m;	/* kept loaded for the life of the process */
}

/* The module, or NULL with err saying why. */
static const struct pg_cuda_module *cuda_module(char *err, size_t err_len)
{
	pthread_once(&cuda_once, cuda_load);
	if (!cuda && err)
		snprintf(err, err_len, "%s", cuda_why);
	return cuda;
}

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
		if (!cuda_module(err, err_len))
			return -ENOTSUP;
		*out = cuda->backend_create(spec->index, err, err_len);
		return *out ? 0 : -ENODEV;
	}
	snprintf(err, err_len, "no such kind of backend (%d)", (int)spec->kind);
	return -EINVAL;
}

int pg_backend_built(enum pg_backend_kind k)
{
	return k == PG_BACKEND_CPU ||
	       (k == PG_BACKEND_CUDA && cuda_module(NULL, 0));
}

int pg_gpu_count(void)
{
	return cuda_module(NULL, 0) ? cuda->device_count() : 0;
}

int pg_gpu_info(int index, struct pg_gpu_info *out, char *err,
		size_t err_len)
{
	struct pg_cuda_device_info info;
	int rc;

	if (!cuda_module(err, err_len))
		return -ENOTSUP;
	rc = cuda->device_info(index, &info, err, err_len);
	if (rc)
		return rc;
	memset(out, 0, sizeof(*out));
	snprintf(out->name, sizeof(out->name), "%s", info.name);
	out->total_bytes = info.total_bytes;
	out->free_bytes = info.free_bytes;
	return 0;
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

/* ---- device groups: NCCL between GPUs, in the CUDA module ---- */

#define NO_NCCL "this pagodad's CUDA module was built without NCCL; install NCCL and rebuild"

int pg_device_groups_built(void)
{
	return cuda_module(NULL, 0) && cuda->nccl_join &&
	       cuda->nccl_id_bytes == PG_DEVICE_GROUP_ID_BYTES;
}

int pg_device_group_id(void *id, size_t len, char *err, size_t err_len)
{
	if (!cuda_module(err, err_len))
		return -ENOTSUP;
	if (!pg_device_groups_built()) {
		snprintf(err, err_len, NO_NCCL);
		return -ENOTSUP;
	}
	return cuda->nccl_unique_id(id, len, err, err_len);
}

int pg_device_group_join(int size, int rank, const void *id,
			 struct pg_backend *be, int device_index,
			 const atomic_int *cancel, int64_t deadline_ns,
			 struct pg_comm **out, char *err, size_t err_len)
{
	if (!cuda_module(err, err_len))
		return -ENOTSUP;
	if (!pg_device_groups_built()) {
		snprintf(err, err_len, NO_NCCL);
		return -ENOTSUP;
	}
	return cuda->nccl_join(size, rank, id, be, device_index, cancel,
			       deadline_ns, out, err, err_len);
}
