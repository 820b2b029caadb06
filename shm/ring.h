/*
 * ring.h - the single-producer single-consumer rings of the segment and
 * the byte arenas beside them, for both sides (pagodad and libpagoda).
 *
 * A ring is n_slots (a power of two) 64-byte slots and the control words
 * of struct pg_ring_ctl.  tail and head are free-running 32-bit counters;
 * entry k lives in slot k & (n_slots - 1).  Each side keeps a private view
 * (struct pg_ring): the producer fills slots and publishes many at once
 * with one release store of tail; the consumer reads up to the tail it
 * acquired, and releases what it has consumed with one store of head.  The
 * other side's counter is re-read only when the cached copy runs out, so a
 * busy ring costs two cache-line transfers per batch, not per entry.
 *
 * The peer may be hostile (the daemon's view of a client's ring): a
 * counter that moves backwards or claims more than n_slots entries marks
 * the ring corrupt (pg_ring_corrupt) and nothing more is read from it.
 *
 * Sleeping without losing a wake-up (Dekker's store-then-load on both
 * sides):
 *   consumer: sleeping = 1; full fence; if the ring is not empty, sleeping
 *             = 0 and carry on; else wait on the doorbell.
 *   producer: publish tail; full fence; if sleeping, ring the doorbell.
 * Either the producer sees the flag or the consumer sees the entry.
 * The doorbell is the caller's (an eventfd); this file makes no system call.
 */
#ifndef PAGODA_SHM_RING_H
#define PAGODA_SHM_RING_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "wire/client_proto.h"

/* One side's view of a ring. */
struct pg_ring {
	struct pg_ring_ctl *ctl;	/* in the segment */
	uint8_t *slots;			/* n_slots × PG_SLOT_BYTES */
	uint32_t mask;			/* n_slots - 1 */
	uint32_t local;			/* producer: next entry to fill;
					   consumer: next entry to read */
	uint32_t shared;		/* producer: tail published;
					   consumer: head released */
	uint32_t cached;		/* producer: head last seen;
					   consumer: tail last seen */
	int corrupt;			/* the peer's counter made no sense */
};

/*
 * pg_ring_attach - view the ring whose control words are ctl and whose
 * slots start at slots, as producer (1) or consumer (0), taking the
 * counters as they are now.  n_slots must be a power of two.
 */
static inline void pg_ring_attach(struct pg_ring *r, struct pg_ring_ctl *ctl,
				  void *slots, uint32_t n_slots, int producer)
{
	uint32_t tail = atomic_load_explicit(&ctl->tail, memory_order_acquire);
	uint32_t head = atomic_load_explicit(&ctl->head, memory_order_acquire);

	r->ctl = ctl;
	r->slots = slots;
	r->mask = n_slots - 1;
	r->local = r->shared = producer ? tail : head;
	r->cached = producer ? head : tail;
	r->corrupt = tail - head > n_slots;	/* the peer may have moved first */
}

/* pg_ring_slot - the slot of entry k. */
static inline void *pg_ring_slot(const struct pg_ring *r, uint32_t k)
{
	return r->slots + (size_t)(k & r->mask) * PG_SLOT_BYTES;
}

/* ---- producer ---- */

/*
 * pg_ring_reserve - the slot of the next entry to fill, or NULL when the
 * ring is full (or corrupt).  Fill it, then pg_ring_commit().
 */
static inline void *pg_ring_reserve(struct pg_ring *r)
{
	uint32_t n = r->mask + 1;

	if (r->corrupt)
		return NULL;
	if (r->local - r->cached >= n) {
		uint32_t head = atomic_load_explicit(&r->ctl->head,
						     memory_order_acquire);

		/* head may only move forward, up to what we published */
		if (r->shared - head > n || head - r->cached > n) {
			r->corrupt = 1;
			return NULL;
		}
		r->cached = head;
		if (r->local - r->cached >= n)
			return NULL;
	}
	return pg_ring_slot(r, r->local);
}

/* pg_ring_commit - count the reserved slot as filled (not yet visible). */
static inline void pg_ring_commit(struct pg_ring *r)
{
	r->local++;
}

/*
 * pg_ring_publish - make every committed entry visible to the consumer.
 * Returns 1 when the consumer sleeps and wants its doorbell rung, 0
 * otherwise (including when there was nothing new).
 */
static inline int pg_ring_publish(struct pg_ring *r)
{
	if (r->local == r->shared)
		return 0;
	r->shared = r->local;
	atomic_store_explicit(&r->ctl->tail, r->local, memory_order_release);
	atomic_thread_fence(memory_order_seq_cst);
	return atomic_load_explicit(&r->ctl->sleeping,
				    memory_order_relaxed) != 0;
}

/*
 * pg_ring_consumed - entries the consumer has released: the producer's
 * last view of head (refreshed).  Used to reclaim arena runs.
 */
static inline uint32_t pg_ring_consumed(struct pg_ring *r)
{
	uint32_t head = atomic_load_explicit(&r->ctl->head,
					     memory_order_acquire);

	if (r->shared - head > r->mask + 1 || head - r->cached > r->mask + 1)
		r->corrupt = 1;
	else
		r->cached = head;
	return r->cached;
}

/* ---- consumer ---- */

/*
 * pg_ring_peek - the next entry, or NULL when there is none (or the ring is
 * corrupt).  The entry stays valid until pg_ring_release(); a hostile
 * producer can still rewrite it, so copy it before trusting it.
 */
static inline const void *pg_ring_peek(struct pg_ring *r)
{
	if (r->corrupt)
		return NULL;
	if (r->local == r->cached) {
		uint32_t tail = atomic_load_explicit(&r->ctl->tail,
						     memory_order_acquire);

		/* tail may only move forward, at most n ahead of head */
		if (tail - r->shared > r->mask + 1 ||
		    tail - r->cached > r->mask + 1) {
			r->corrupt = 1;
			return NULL;
		}
		r->cached = tail;
		if (r->local == r->cached)
			return NULL;
	}
	return pg_ring_slot(r, r->local);
}

/* pg_ring_consume - step past the entry pg_ring_peek() returned. */
static inline void pg_ring_consume(struct pg_ring *r)
{
	r->local++;
}

/* pg_ring_release - give the consumed slots back to the producer. */
static inline void pg_ring_release(struct pg_ring *r)
{
	if (r->local == r->shared)
		return;
	r->shared = r->local;
	atomic_store_explicit(&r->ctl->head, r->local, memory_order_release);
}

/*
 * pg_ring_prepare_sleep - the consumer is about to wait on its doorbell:
 * advertise it, then look once more.  Returns 1 when it may sleep (the
 * producer will ring), 0 when entries arrived meanwhile (the flag is
 * cleared again: carry on without sleeping).
 */
static inline int pg_ring_prepare_sleep(struct pg_ring *r)
{
	uint32_t tail;

	atomic_store_explicit(&r->ctl->sleeping, 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_seq_cst);
	tail = atomic_load_explicit(&r->ctl->tail, memory_order_acquire);
	if (tail != r->local) {
		atomic_store_explicit(&r->ctl->sleeping, 0,
				      memory_order_relaxed);
		return 0;
	}
	return 1;
}

/* pg_ring_awake - the consumer woke up: no doorbell wanted while busy. */
static inline void pg_ring_awake(struct pg_ring *r)
{
	atomic_store_explicit(&r->ctl->sleeping, 0, memory_order_relaxed);
}

/* pg_ring_corrupt - whether the peer's counters made no sense. */
static inline int pg_ring_corrupt(const struct pg_ring *r)
{
	return r->corrupt;
}

/* ---- arenas: the writer's bookkeeping of a byte ring ---- */

/*
 * The writer of an arena allocates runs in order; each run belongs to the
 * ring entry that names it, and runs are freed in order once the reader
 * has consumed their entries.  Nothing of this lives in the segment: the
 * reader only reads (off, len) from entries and checks them.
 */
struct pg_arena {
	uint8_t *base;
	uint32_t size;
	uint64_t alloc;		/* bytes ever allocated (incl. skipped ends) */
	uint64_t freed;		/* bytes ever freed */
	uint64_t *end;		/* (n_slots) alloc after entry k's run */
	uint32_t mask;		/* the ring's n_slots - 1 */
	uint32_t entries_freed;	/* entries whose runs are free */
};

/*
 * pg_arena_init - an arena of size bytes at base for a ring of n_slots
 * entries, whose first entry is `first` (the ring's tail now); end must
 * have room for n_slots values.
 */
static inline void pg_arena_init(struct pg_arena *a, void *base, uint32_t size,
				 uint64_t *end, uint32_t n_slots,
				 uint32_t first)
{
	a->base = base;
	a->size = size;
	a->alloc = a->freed = 0;
	a->end = end;
	a->mask = n_slots - 1;
	a->entries_freed = first;
	for (uint32_t i = 0; i < n_slots; i++)
		end[i] = 0;
}

/*
 * pg_arena_reclaim - the reader has consumed entries before `head`: free
 * their runs.  Call before allocating for entry k = the ring's next entry.
 */
static inline void pg_arena_reclaim(struct pg_arena *a, uint32_t head)
{
	for (; a->entries_freed != head; a->entries_freed++) {
		uint64_t e = a->end[a->entries_freed & a->mask];

		if (e > a->freed)
			a->freed = e;
	}
}

/*
 * pg_arena_alloc - len contiguous bytes (len <= size) for ring entry k;
 * their offset goes to *off.  Returns the bytes, or NULL when the arena
 * has no such run free now (reclaim, or wait for the reader; NULL too
 * while entry k - n_slots's run is not reclaimed).  Call pg_arena_alloc at
 * most once per entry and for every entry in order (with len 0 when the
 * entry has no payload) so that runs free in order.
 */
static inline void *pg_arena_alloc(struct pg_arena *a, uint32_t k,
				   uint32_t len, uint32_t *off)
{
	uint64_t start = a->alloc;
	uint32_t pos = (uint32_t)(start % a->size);

	if (len > a->size || k - a->entries_freed > a->mask)
		return NULL;	/* too long, or end[] still holds a live entry's */
	if (len && pos + len > a->size) {	/* no wrapping: skip the end */
		start += a->size - pos;
		pos = 0;
	}
	if (a->freed == a->alloc)	/* nothing live: the skipped end is free */
		a->freed = start;
	if (start + len - a->freed > a->size)
		return NULL;
	a->alloc = start + len;
	a->end[k & a->mask] = a->alloc;
	*off = pos;
	return a->base + pos;
}

/*
 * pg_arena_check - the reader's check of a run an entry names: inside an
 * arena of size bytes, without wrapping.
 */
static inline int pg_arena_check(uint32_t size, uint32_t off, uint32_t len)
{
	return off <= size && len <= size - off;
}

#endif
