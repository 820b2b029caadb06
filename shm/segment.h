/*
 * segment.h - the layout of a client's shared-memory segment
 * (wire/client_proto.h says what lies where) and the checks each side
 * makes of it.
 *
 * The daemon lays a segment out with pg_seg_layout(), creates the memfd of
 * header.seg_bytes bytes, writes the header and seals the file; the client
 * checks the seals (F_GET_SEALS) and then the header with pg_seg_check()
 * before it uses any offset in it.
 */
#ifndef PAGODA_SHM_SEGMENT_H
#define PAGODA_SHM_SEGMENT_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "wire/client_proto.h"

/* Bounds on the geometry either side accepts. */
#define PG_SEG_MIN_SLOTS 8u
#define PG_SEG_MAX_SLOTS 65536u
#define PG_SEG_MIN_ARENA 4096u
#define PG_SEG_MAX_ARENA (256u << 20)

static inline int pg_seg_pow2(uint32_t n)
{
	return n && !(n & (n - 1));
}

static inline uint64_t pg_seg_align(uint64_t n)
{
	return (n + PG_CACHE_LINE - 1) / PG_CACHE_LINE * PG_CACHE_LINE;
}

/*
 * pg_seg_layout - fill h (zeroed first) with magic, version and the
 * geometry of a segment of sq_slots / cq_slots entries (powers of two) and
 * arenas of sq_arena / cq_arena bytes: offsets and seg_bytes (rounded up
 * to a multiple of 4096).  Returns 0, or -1 when a figure is out of
 * bounds.
 */
static inline int pg_seg_layout(struct pg_seg_header *h, uint32_t sq_slots,
				uint32_t cq_slots, uint32_t sq_arena,
				uint32_t cq_arena)
{
	uint64_t off = PG_SEG_HEADER_BYTES;

	if (!pg_seg_pow2(sq_slots) || !pg_seg_pow2(cq_slots) ||
	    sq_slots < PG_SEG_MIN_SLOTS || sq_slots > PG_SEG_MAX_SLOTS ||
	    cq_slots < PG_SEG_MIN_SLOTS || cq_slots > PG_SEG_MAX_SLOTS ||
	    sq_arena < PG_SEG_MIN_ARENA || sq_arena > PG_SEG_MAX_ARENA ||
	    cq_arena < PG_SEG_MIN_ARENA || cq_arena > PG_SEG_MAX_ARENA)
		return -1;
	memset(h, 0, sizeof(*h));
	h->magic = PG_PROTO_MAGIC;
	h->version = PG_PROTO_VERSION;
	h->sq_slots = sq_slots;
	h->cq_slots = cq_slots;
	h->sq_arena = sq_arena;
	h->cq_arena = cq_arena;
	h->sq_off = (uint32_t)off;
	off += (uint64_t)sq_slots * PG_SLOT_BYTES;
	h->cq_off = (uint32_t)off;
	off += (uint64_t)cq_slots * PG_SLOT_BYTES;
	h->sq_arena_off = (uint32_t)off;
	off = pg_seg_align(off + sq_arena);
	h->cq_arena_off = (uint32_t)off;
	off = pg_seg_align(off + cq_arena);
	h->seg_bytes = (off + 4095) / 4096 * 4096;
	return 0;
}

/*
 * pg_seg_check - whether the header of a mapping of map_bytes bytes
 * describes a segment this side can use: magic, version, geometry in
 * bounds, every region inside the mapping and in order.  Returns 0, or -1
 * with a message in err.
 */
static inline int pg_seg_check(const struct pg_seg_header *h,
			       uint64_t map_bytes, char *err, size_t err_len)
{
	uint64_t end;

	if (map_bytes < PG_SEG_HEADER_BYTES || h->magic != PG_PROTO_MAGIC) {
		snprintf(err, err_len, "the shared segment is not a pagoda segment");
		return -1;
	}
	if (h->version != PG_PROTO_VERSION) {
		snprintf(err, err_len, "the shared segment speaks protocol %u, this side %u",
			 h->version, PG_PROTO_VERSION);
		return -1;
	}
	if (!pg_seg_pow2(h->sq_slots) || !pg_seg_pow2(h->cq_slots) ||
	    h->sq_slots < PG_SEG_MIN_SLOTS || h->sq_slots > PG_SEG_MAX_SLOTS ||
	    h->cq_slots < PG_SEG_MIN_SLOTS || h->cq_slots > PG_SEG_MAX_SLOTS ||
	    h->sq_arena < PG_SEG_MIN_ARENA || h->sq_arena > PG_SEG_MAX_ARENA ||
	    h->cq_arena < PG_SEG_MIN_ARENA || h->cq_arena > PG_SEG_MAX_ARENA) {
		snprintf(err, err_len, "the shared segment's geometry is out of bounds");
		return -1;
	}
	end = h->sq_off + (uint64_t)h->sq_slots * PG_SLOT_BYTES;
	if (h->sq_off < PG_SEG_HEADER_BYTES || h->sq_off % PG_CACHE_LINE ||
	    h->cq_off < end || h->cq_off % PG_CACHE_LINE ||
	    h->sq_arena_off < h->cq_off + (uint64_t)h->cq_slots * PG_SLOT_BYTES ||
	    h->sq_arena_off % PG_CACHE_LINE ||
	    h->cq_arena_off < (uint64_t)h->sq_arena_off + h->sq_arena ||
	    h->cq_arena_off % PG_CACHE_LINE ||
	    (uint64_t)h->cq_arena_off + h->cq_arena > map_bytes ||
	    h->seg_bytes != map_bytes) {
		snprintf(err, err_len, "the shared segment's regions do not fit its %llu bytes",
			 (unsigned long long)map_bytes);
		return -1;
	}
	return 0;
}

#endif
