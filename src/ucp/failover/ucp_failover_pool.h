/**
 * Copyright (C) Multi-rail failover for UCX authors. 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 *
 * The worker's buffers (ucp_failover_pool.c): what the failover module takes
 * per message, from size buckets, with counted references. Taking and
 * putting back a buffer is inline: it is on the path of every message.
 */

#ifndef UCP_FAILOVER_POOL_H_
#define UCP_FAILOVER_POOL_H_

#include <ucp/api/ucp_def.h>
#include <ucp/core/ucp_types.h>
#include <ucs/arch/bitops.h>
#include <ucs/datastruct/list.h>
#include <ucs/datastruct/mpool.h>
#include <ucs/datastruct/mpool.inl>
#include <ucs/datastruct/mpool_set.h>
#include <ucs/datastruct/mpool_set.inl>
#include <ucs/sys/compiler_def.h>
#include <ucs/sys/math.h>
#include <uct/api/uct_def.h>

#include <stddef.h>

BEGIN_C_DECLS

/* A buffer holds a power of two from 64 to 64 KiB, plus 128 bytes (UCS's
 * mpool set, its per-element area): a full fragment of 8 KiB less the
 * transport's header, with the trailer and the retained entry's header,
 * fits the 8 KiB bucket, and a zero-copy message of UCT/TCP (up to its
 * 64 KiB segment) the 64 KiB one. Larger buffers are malloc'ed */
#define UCP_FAILOVER_POOL_MIN     64
#define UCP_FAILOVER_POOL_MAX     (64 * 1024)
#define UCP_FAILOVER_POOL_SLACK   128

/* A registered buffer (ucp_failover_pool_get_reg) holds this much; the
 * handle of the memory it is in follows it, in the element */
#define UCP_FAILOVER_POOL_REG_SIZE 1016


/**
 * A user that waits for the pool to hold less than its limit: @a cb is
 * called (once) when it does, from the put that brings it there.
 */
typedef struct ucp_failover_pool_waiter {
    ucs_list_link_t list;
    int             waiting;
    void            (*cb)(struct ucp_failover_pool_waiter *waiter);
} ucp_failover_pool_waiter_t;


typedef struct ucp_failover_pool {
    size_t          held;     /* bytes of the buffers handed out */
    size_t          limit;    /* held from which users wait (SIZE_MAX:
                                 never) */
    size_t          half;     /* limit / 2 */
    unsigned        refcount; /* the owner's, users', and one per buffer */
    ucs_list_link_t waiters;  /* ucp_failover_pool_waiter_t */
    ucs_mpool_set_t buffers;  /* each mpool's priv: this pool */
    ucp_context_h   context;  /* registers the registered buffers */
    int             reg_ok;   /* registered buffers are handed out */
    int             reg_failed; /* they were, until one could not be */
    ucs_mpool_t     reg;      /* registered buffers; priv: this pool */
} ucp_failover_pool_t;


/**
 * Create the buffers of @a worker (named in errors; its context's memory
 * domains register the registered buffers; NULL: none), with one
 * reference: the worker's. Users that keep the pool take one of their own
 * (ucp_failover_pool_ref); each buffer handed out holds one until it is put
 * back. Users wait while it holds @a limit bytes or more
 * (ucp_failover_pool_full). NULL: no memory (logged); users then malloc.
 */
ucp_failover_pool_t *ucp_failover_pool_create(ucp_worker_h worker,
                                              size_t limit);
void ucp_failover_pool_destroy(ucp_failover_pool_t *pool);
void *ucp_failover_pool_get_slow(ucp_failover_pool_t *pool, size_t size,
                                 size_t *held_p);
void ucp_failover_pool_put_slow(void *buf, size_t held);
void ucp_failover_pool_wake(ucp_failover_pool_t *pool);


/**
 * Whether the pools of @a context's workers have registered buffers: for
 * the messages sent by reference (UCX_MULTIRAIL_REF_THRESH) on transports
 * whose memory domains need memory handles (RDMA).
 */
int ucp_failover_pool_reg_wanted(ucp_context_h context);


/**
 * Whether the registered buffers of @a context's workers, if any, have a
 * memory handle on memory domain @a md_index.
 */
int ucp_failover_pool_reg_covers(ucp_context_h context,
                                 ucp_md_index_t md_index);


/**
 * A buffer of at least @a size bytes (UCP_FAILOVER_POOL_REG_SIZE at most) in
 * memory registered on every memory domain of the context that registers
 * (ucp_failover_pool_memh), and in @a held_p the bytes it holds; NULL if the
 * pool has none (not wanted, too large, or no memory: then never again).
 * Put it back with ucp_failover_pool_put().
 */
void *ucp_failover_pool_get_reg(ucp_failover_pool_t *pool, size_t size,
                                size_t *held_p);


/**
 * The memory handle on memory domain @a md_index of a buffer from
 * ucp_failover_pool_get_reg(), UCT_MEM_HANDLE_NULL if it has none there.
 */
uct_mem_h ucp_failover_pool_memh(const void *buf, ucp_md_index_t md_index);


/** Wait for @a pool to hold less than its limit (no-op if waiting) */
void ucp_failover_pool_wait(ucp_failover_pool_t *pool,
                            ucp_failover_pool_waiter_t *waiter);


/** Stop waiting (no-op if not waiting) */
void ucp_failover_pool_cancel(ucp_failover_pool_waiter_t *waiter);


/* What a buffer for @a size bytes holds beyond the slack: UCS's mpool set
 * takes a size from the pool whose power of two is larger */
static UCS_F_ALWAYS_INLINE size_t ucp_failover_pool_payload(size_t size)
{
    return (size > UCP_FAILOVER_POOL_SLACK) ?
           (size - UCP_FAILOVER_POOL_SLACK) : 0;
}


/* What the buffer for @a size bytes holds, if it comes from a bucket */
static UCS_F_ALWAYS_INLINE size_t ucp_failover_pool_bucket_size(size_t size)
{
    return ucs_max(ucs_roundup_pow2(ucp_failover_pool_payload(size) + 1),
                   UCP_FAILOVER_POOL_MIN) +
           UCP_FAILOVER_POOL_SLACK;
}


static UCS_F_ALWAYS_INLINE void
ucp_failover_pool_ref(ucp_failover_pool_t *pool)
{
    if (pool != NULL) {
        ++pool->refcount;
    }
}


static UCS_F_ALWAYS_INLINE void
ucp_failover_pool_unref(ucp_failover_pool_t *pool)
{
    if ((pool != NULL) && ucs_unlikely(--pool->refcount == 0)) {
        ucp_failover_pool_destroy(pool);
    }
}


/**
 * A buffer of at least @a size bytes from @a pool, and in @a held_p the bytes
 * it holds; NULL if there is no memory. One larger than the largest bucket,
 * or any without a pool (@a pool NULL), is malloc'ed (and counted in the
 * pool's). Put it back with ucp_failover_pool_put() and that same count.
 */
static UCS_F_ALWAYS_INLINE void *
ucp_failover_pool_get(ucp_failover_pool_t *pool, size_t size, size_t *held_p)
{
    void *buf;

    if (ucs_likely((pool != NULL) &&
                   (ucp_failover_pool_payload(size) <
                    UCP_FAILOVER_POOL_MAX))) {
        buf = ucs_mpool_set_get_inline(&pool->buffers,
                                       ucp_failover_pool_payload(size));
        if (ucs_likely(buf != NULL)) {
            *held_p     = ucp_failover_pool_bucket_size(size);
            pool->held += *held_p;
            ++pool->refcount;
        }
        return buf;
    }

    return ucp_failover_pool_get_slow(pool, size, held_p);
}


static UCS_F_ALWAYS_INLINE void ucp_failover_pool_put(void *buf, size_t held)
{
    ucs_mpool_elem_t *elem = ucs_mpool_obj_to_elem(buf);
    ucp_failover_pool_t *pool;

    if (ucs_unlikely(elem->mpool == NULL)) {
        ucp_failover_pool_put_slow(buf, held);
        return;
    }

    /* each memory pool's private area names the failover pool */
    pool        = *(ucp_failover_pool_t**)(elem->mpool->data + 1);
    pool->held -= held;
    ucs_mpool_set_put_inline(buf);
    if (ucs_unlikely(!ucs_list_is_empty(&pool->waiters)) &&
        (pool->held < pool->limit)) {
        ucp_failover_pool_wake(pool);
    }
    ucp_failover_pool_unref(pool);
}


/** Bytes of the buffers of @a pool handed out now */
static UCS_F_ALWAYS_INLINE size_t
ucp_failover_pool_held(const ucp_failover_pool_t *pool)
{
    return (pool == NULL) ? 0 : pool->held;
}


/** Whether @a pool holds half its limit or more (users ask their peers to
 *  acknowledge what they hold) */
static UCS_F_ALWAYS_INLINE int
ucp_failover_pool_half_full(const ucp_failover_pool_t *pool)
{
    return (pool != NULL) && (pool->held >= pool->half);
}


/** Whether @a pool holds its limit or more (users wait) */
static UCS_F_ALWAYS_INLINE int
ucp_failover_pool_full(const ucp_failover_pool_t *pool)
{
    return (pool != NULL) && ucs_unlikely(pool->held >= pool->limit);
}

END_C_DECLS

#endif
