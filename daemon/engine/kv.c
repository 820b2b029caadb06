/*
 * kv.c - KV page storage: one anonymous mapping of pages.
 *
 * The mapping is asked for explicit huge pages when configured (falling back
 * when the system has none reserved) and for transparent huge pages always,
 * since attention walks it page by page and TLB misses would otherwise
 * show; it can be bound to a NUMA node (libnuma) and locked in memory.
 * Allocation of pages to sequences is kvcache.c's; nothing here knows which
 * page is in use.
 */
#include <errno.h>
#include <numa.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "daemon/engine/kv.h"

struct pg_kv_store {
	struct pg_kv_layout layout;
	struct pg_backend *be;		/* NULL: host mapping; else its memory */
	void *bounce;			/* a page of host memory, for copies */
	size_t map_bytes;
};

#define HUGE_2M (2u << 20)

/* Map bytes, on explicit 2 MiB pages when asked and available. */
static void *map_pages(struct pg_kv_store *s, size_t bytes, int hugetlb)
{
	void *p;

	if (hugetlb) {
		s->map_bytes = (bytes + HUGE_2M - 1) / HUGE_2M * HUGE_2M;
		p = mmap(NULL, s->map_bytes, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
		if (p != MAP_FAILED)
			return p;
	}
	s->map_bytes = bytes;
	p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p != MAP_FAILED)
		madvise(p, bytes, MADV_HUGEPAGE);
	return p == MAP_FAILED ? NULL : p;
}

/* Bind to a node and lock, as mem asks: 0 or -errno. */
static int place_pages(void *base, size_t bytes, const struct pg_kv_mem *mem)
{
	if (mem->numa_node >= 0) {
		if (numa_available() < 0 || mem->numa_node > numa_max_node())
			return -EINVAL;
		numa_tonode_memory(base, bytes, mem->numa_node);
	}
	if (mem->lock && mlock(base, bytes) < 0)
		return -errno;
	return 0;
}

size_t pg_kv_page_bytes_for(int page_tokens, int n_blocks, int n_kv_heads,
			    int head_dim, enum pg_dtype type)
{
	return (size_t)page_tokens * n_blocks * 2 * n_kv_heads * head_dim *
	       pg_dtype_block_bytes(type);
}

/* A store of these dimensions, its memory not yet there; *out or -errno. */
static int store_new(int n_pages, int page_tokens, int n_blocks,
		     int n_kv_heads, int head_dim, enum pg_dtype type,
		     struct pg_kv_store **out)
{
	struct pg_kv_store *s;

	if (n_pages < 1 || page_tokens < 1 || n_blocks < 1 ||
	    n_kv_heads < 1 || head_dim < 1 ||
	    (type != PG_F32 && type != PG_F16 && type != PG_BF16))
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->layout = (struct pg_kv_layout){
		.page_bytes = pg_kv_page_bytes_for(page_tokens, n_blocks,
						   n_kv_heads, head_dim, type),
		.page_tokens = page_tokens,
		.n_blocks = n_blocks,
		.n_kv_heads = n_kv_heads,
		.head_dim = head_dim,
		.type = type,
	};
	*out = s;
	return 0;
}

int pg_kv_store_create_on(struct pg_backend *be, int n_pages,
			  int page_tokens, int n_blocks, int n_kv_heads,
			  int head_dim, enum pg_dtype type,
			  struct pg_kv_store **out)
{
	struct pg_kv_store *s;
	int rc;

	rc = store_new(n_pages, page_tokens, n_blocks, n_kv_heads, head_dim,
		       type, &s);
	if (rc)
		return rc;
	s->be = be;
	s->map_bytes = s->layout.page_bytes * (size_t)n_pages;
	s->layout.base = be->ops->alloc(be, s->map_bytes);
	s->bounce = malloc(s->layout.page_bytes);
	if (!s->layout.base || !s->bounce) {
		pg_kv_store_destroy(s);
		return -ENOMEM;
	}
	*out = s;
	return 0;
}

int pg_kv_store_create(int n_pages, int page_tokens, int n_blocks,
		       int n_kv_heads, int head_dim, enum pg_dtype type,
		       const struct pg_kv_mem *mem, struct pg_kv_store **out)
{
	static const struct pg_kv_mem defaults = { .numa_node = -1 };
	struct pg_kv_store *s;
	int rc;

	if (!mem)
		mem = &defaults;
	rc = store_new(n_pages, page_tokens, n_blocks, n_kv_heads, head_dim,
		       type, &s);
	if (rc)
		return rc;
	s->layout.base = map_pages(s, s->layout.page_bytes * (size_t)n_pages,
				   mem->hugetlb);
	if (!s->layout.base) {
		free(s);
		return -ENOMEM;
	}
	rc = place_pages(s->layout.base, s->map_bytes, mem);
	if (rc) {
		pg_kv_store_destroy(s);
		return rc;
	}
	*out = s;
	return 0;
}

void pg_kv_store_destroy(struct pg_kv_store *s)
{
	if (!s)
		return;
	if (s->be)
		s->be->ops->free(s->be, s->layout.base);
	else
		munmap(s->layout.base, s->map_bytes);
	free(s->bounce);
	free(s);
}

void pg_kv_store_set_cp(struct pg_kv_store *s, int cp_size, int cp_rank)
{
	s->layout.cp_size = cp_size;
	s->layout.cp_rank = cp_rank;
}

const struct pg_kv_layout *pg_kv_store_layout(const struct pg_kv_store *s)
{
	return &s->layout;
}

int pg_kv_store_copy(struct pg_kv_store *s, int32_t src, int32_t dst,
		     char *err, size_t err_len)
{
	size_t pb = s->layout.page_bytes;
	char *base = s->layout.base;
	int rc;

	if (!s->be) {
		memcpy(base + (size_t)dst * pb, base + (size_t)src * pb, pb);
		return 0;
	}
	/* copy-on-write copies are rare (a fork's partly filled page) */
	rc = s->be->ops->download(s->be, s->bounce, base + (size_t)src * pb,
				  pb, err, err_len);
	if (!rc)
		rc = s->be->ops->upload(s->be, base + (size_t)dst * pb,
					s->bounce, pb, err, err_len);
	return rc;
}
