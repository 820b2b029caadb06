/*
 * kv.h - the paged KV cache: one pool of fixed-size pages per stage and,
 * per sequence, a page table.
 *
 * A page holds page_tokens token slots of K and V for every block of the
 * stage (layout in kernels/backend.h).  Allocation and freeing are O(1)
 * (a stack of free page ids), the pool never fragments, and a sequence
 * wastes less than one page.  The pool knows nothing of models or requests.
 */
#ifndef PAGODA_KV_H
#define PAGODA_KV_H

#include <stddef.h>
#include <stdint.h>

#include "../../kernels/backend.h"

struct pg_kv_pool;

/*
 * pg_kv_pool_create - n_pages pages of page_tokens slots for n_blocks
 * blocks of n_kv_heads × head_dim values of `type` (F32, F16 or BF16).
 * Returns 0 with *out, -EINVAL for a bad shape or type, -ENOMEM.
 */
int pg_kv_pool_create(int n_pages, int page_tokens, int n_blocks,
		      int n_kv_heads, int head_dim, enum pg_dtype type,
		      struct pg_kv_pool **out);

/* pg_kv_pool_destroy - free the pool; NULL is allowed. */
void pg_kv_pool_destroy(struct pg_kv_pool *p);

/* pg_kv_pool_layout - the page layout the backend reads and writes. */
const struct pg_kv_layout *pg_kv_pool_layout(const struct pg_kv_pool *p);

/* pg_kv_page_bytes_for - bytes of one page of such a pool. */
size_t pg_kv_page_bytes_for(int page_tokens, int n_blocks, int n_kv_heads,
			    int head_dim, enum pg_dtype type);

/* Pages in all and free now. */
int pg_kv_pool_n_pages(const struct pg_kv_pool *p);
int pg_kv_pool_n_free(const struct pg_kv_pool *p);

/* pg_kv_page_alloc - a free page id, or -1 when none is left. */
int32_t pg_kv_page_alloc(struct pg_kv_pool *p);

/* pg_kv_page_free - return page id to the pool. */
void pg_kv_page_free(struct pg_kv_pool *p, int32_t page);

/*
 * A sequence's page table: pages[i] holds positions
 * i * page_tokens .. (i + 1) * page_tokens - 1.  n_ctx positions have K/V.
 */
struct pg_seq_kv {
	int32_t *pages;
	int n_pages;
	int cap_pages;
	int n_ctx;
};

/*
 * pg_seq_kv_reserve - make room for positions up to n_tokens - 1 (allocating
 * pages as needed).  Returns 0, or -ENOSPC when the pool ran out (pages
 * already taken stay with the sequence), -ENOMEM.
 */
int pg_seq_kv_reserve(struct pg_kv_pool *p, struct pg_seq_kv *s, int n_tokens);

/* pg_seq_kv_release - give all of the sequence's pages back; reset it. */
void pg_seq_kv_release(struct pg_kv_pool *p, struct pg_seq_kv *s);

/* pg_seq_kv_slot - the physical slot of position pos (reserved already). */
static inline int32_t pg_seq_kv_slot(const struct pg_seq_kv *s,
				     int page_tokens, int pos)
{
	return s->pages[pos / page_tokens] * page_tokens + pos % page_tokens;
}

#endif
