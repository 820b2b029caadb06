/*
 * kv.h - KV page storage of one stage: n_pages fixed-size pages in one
 * mapping, laid out as kernels/backend.h's struct pg_kv_layout says.
 *
 * A page holds page_tokens token slots of K and V for every block of the
 * stage.  This is storage only: which page belongs to which sequence is
 * kvcache.h's business, so a page id names the same tokens in every stage.
 */
#ifndef PAGODA_KV_H
#define PAGODA_KV_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"

struct pg_kv_store;

/* Where and how the pages' memory is held. */
struct pg_kv_mem {
	int numa_node;		/* bind to this NUMA node; -1: no binding */
	int lock;		/* mlock the pages (needs RLIMIT_MEMLOCK room) */
	int hugetlb;		/* try explicit huge pages (MAP_HUGETLB) first;
				   transparent huge pages are always asked for */
};

/*
 * pg_kv_store_create - n_pages pages of page_tokens slots for n_blocks
 * blocks of n_kv_heads × head_dim values of `type` (F32, F16 or BF16),
 * held as mem says (NULL: defaults, no binding, not locked).  Returns 0
 * with *out, -EINVAL for a bad shape, type or node, -ENOMEM, or the -errno
 * of a failed mlock (-EPERM, -ENOMEM: raise RLIMIT_MEMLOCK).
 */
int pg_kv_store_create(int n_pages, int page_tokens, int n_blocks,
		       int n_kv_heads, int head_dim, enum pg_dtype type,
		       const struct pg_kv_mem *mem, struct pg_kv_store **out);

/*
 * pg_kv_store_create_on - the same store in the memory of backend be (a
 * GPU's), allocated with its alloc(); the pages' contents start undefined
 * (attention reads only slots that kv_write filled).  No NUMA, locking or
 * huge pages: the device's memory is its own.  0, -EINVAL or -ENOMEM.
 */
int pg_kv_store_create_on(struct pg_backend *be, int n_pages,
			  int page_tokens, int n_blocks, int n_kv_heads,
			  int head_dim, enum pg_dtype type,
			  struct pg_kv_store **out);

/* pg_kv_store_destroy - unmap; NULL is allowed. */
void pg_kv_store_destroy(struct pg_kv_store *s);

/* pg_kv_store_layout - the page layout the backend reads and writes. */
const struct pg_kv_layout *pg_kv_store_layout(const struct pg_kv_store *s);

/*
 * pg_kv_store_set_cp - this store holds CP rank cp_rank's share (its
 * page_tokens slots) of pages that cover page_tokens * cp_size positions
 * each (see struct pg_kv_layout).  cp_size 1: every position.
 */
void pg_kv_store_set_cp(struct pg_kv_store *s, int cp_size, int cp_rank);

/*
 * pg_kv_store_copy - copy page src to page dst (both < n_pages).  A store
 * in a device's memory copies through the host.  0, or -errno when the
 * device failed (its message in err).
 */
int pg_kv_store_copy(struct pg_kv_store *s, int32_t src, int32_t dst,
		     char *err, size_t err_len);

/* pg_kv_page_bytes_for - bytes of one page of such a store. */
size_t pg_kv_page_bytes_for(int page_tokens, int n_blocks, int n_kv_heads,
			    int head_dim, enum pg_dtype type);

#endif
