/**
 * Copyright (C) Multi-rail failover for UCX authors. 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 *
 * Buffers: the memory the failover module takes per message on the healthy
 * path (retained copies of sequenced messages, trackers of rendezvous
 * fragments) comes from a worker's pool of size buckets, so that a message
 * costs no malloc/free and holds what its size needs.
 *
 * The buckets are UCS's memory pool set: a buffer holds a power of two from
 * 64 bytes to 64 KiB plus 128 bytes (192, 256, 384, ..., 8320, 16512, 32896,
 * 65664). The slack of 128 bytes lets a full fragment of the usual
 * transports (max_bcopy 8 KiB less their header) with its trailer and the
 * entry's own header fit the 8320-byte bucket instead of the next one, and
 * a zero-copy message of UCT/TCP copied whole (its segment, 64 KiB) the
 * 65664-byte one. A larger buffer is malloc'ed, and counted in the pool.
 *
 * Lifetime. The pool belongs to the worker's failover state, which is
 * released before the worker's endpoints (ucp_worker_destroy), and a buffer
 * can outlive its endpoint (a transport's zero-copy send still reads it). So
 * the pool counts references: the worker's, each user's (a sequencing state)
 * and each buffer handed out; the last one released destroys it.
 *
 * Registered buffers. A message sent by reference on a transport whose
 * memory domain needs memory handles (RDMA) sends its trailer from its
 * entry, so the entry must be in registered memory: those entries come
 * from a pool of their own (one size, UCP_FAILOVER_POOL_REG_SIZE), whose
 * chunks are allocated and registered on every memory domain by
 * ucp_mem_map() when they are created (never per message), each element
 * followed by the memory handle of its chunk. It exists only when
 * messages are sent by reference and some memory domain needs handles.
 *
 * Not thread safe: used from the worker's progress and under its async lock,
 * as the rest of the module.
 */

#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "ucp_failover_pool.h"

#include <ucp/core/ucp_context.h>
#include <ucp/core/ucp_mm.h>
#include <ucp/core/ucp_worker.h>

#include <ucs/arch/bitops.h>
#include <ucs/arch/cpu.h>
#include <ucs/datastruct/mpool.h>
#include <ucs/datastruct/mpool.inl>
#include <ucs/debug/assert.h>
#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>
#include <ucs/sys/math.h>
#include <ucs/sys/string.h>
#include <ucs/sys/sys.h>

#include <limits.h>


static ucs_mpool_ops_t ucp_failover_pool_ops = {
    .chunk_alloc   = ucs_mpool_chunk_malloc,
    .chunk_release = ucs_mpool_chunk_free,
    .obj_init      = NULL,
    .obj_cleanup   = NULL,
    .obj_str       = NULL
};

/* A chunk of registered buffers: its memory handle, then the elements */
static ucs_status_t
ucp_failover_pool_reg_chunk_alloc(ucs_mpool_t *mp, size_t *size_p,
                                  void **chunk_p)
{
    ucp_failover_pool_t *pool = *(ucp_failover_pool_t**)ucs_mpool_priv(mp);
    ucp_mem_map_params_t params;
    ucp_mem_h memh, *hdr;
    ucs_status_t status;

    params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                        UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                        UCP_MEM_MAP_PARAM_FIELD_FLAGS;
    params.address    = NULL;
    params.length     = *size_p + sizeof(*hdr);
    params.flags      = UCP_MEM_MAP_ALLOCATE;
    status            = ucp_mem_map(pool->context, &params, &memh);
    if (status != UCS_OK) {
        ucs_diag("cannot allocate registered failover buffers (%zu bytes): "
                 "%s", params.length, ucs_status_string(status));
        return status;
    }

    hdr      = ucp_memh_address(memh);
    *hdr     = memh;
    *chunk_p = hdr + 1;
    *size_p  = ucp_memh_length(memh) - sizeof(*hdr);
    return UCS_OK;
}

static void ucp_failover_pool_reg_chunk_release(ucs_mpool_t *mp, void *chunk)
{
    ucp_failover_pool_t *pool = *(ucp_failover_pool_t**)ucs_mpool_priv(mp);

    ucp_mem_unmap(pool->context, *((ucp_mem_h*)chunk - 1));
}

static void
ucp_failover_pool_reg_obj_init(ucs_mpool_t *mp, void *obj, void *chunk)
{
    /* (the handle after the buffer is aligned) */
    UCS_STATIC_ASSERT((UCP_FAILOVER_POOL_REG_SIZE % sizeof(void*)) == 0);
    *(ucp_mem_h*)UCS_PTR_BYTE_OFFSET(obj, UCP_FAILOVER_POOL_REG_SIZE) =
            *((ucp_mem_h*)chunk - 1);
}

static ucs_mpool_ops_t ucp_failover_pool_reg_ops = {
    .chunk_alloc   = ucp_failover_pool_reg_chunk_alloc,
    .chunk_release = ucp_failover_pool_reg_chunk_release,
    .obj_init      = ucp_failover_pool_reg_obj_init,
    .obj_cleanup   = NULL,
    .obj_str       = NULL
};

int ucp_failover_pool_reg_wanted(ucp_context_h context)
{
    ucp_md_map_t md_map = context->reg_md_map[UCS_MEMORY_TYPE_HOST];
    ucp_md_index_t md_index;

    /* (the threshold where memory handles are needed: none is sent by
     * reference there with "inf") */
    if (ucp_failover_ref_thresh(context, 1) == UCS_MEMUNITS_INF) {
        return 0;
    }

    ucs_for_each_bit(md_index, md_map) {
        if (context->tl_mds[md_index].attr.cap.flags &
            UCT_MD_FLAG_NEED_MEMH) {
            return 1;
        }
    }

    return 0;
}

int ucp_failover_pool_reg_covers(ucp_context_h context,
                                 ucp_md_index_t md_index)
{
    return ucp_failover_pool_reg_wanted(context) &&
           (context->reg_md_map[UCS_MEMORY_TYPE_HOST] & UCS_BIT(md_index));
}

void *ucp_failover_pool_get_reg(ucp_failover_pool_t *pool, size_t size,
                                size_t *held_p)
{
    void *buf;

    if ((pool == NULL) || !pool->reg_ok ||
        (size > UCP_FAILOVER_POOL_REG_SIZE)) {
        return NULL;
    }

    buf = ucs_mpool_get_inline(&pool->reg);
    if (ucs_unlikely(buf == NULL)) {
        /* no more registered memory: from now on the messages are copied
         * (ucp_failover_seq_send_ref) instead of trying each time */
        ucs_diag("failover pool %p: no registered buffers, zero-copy "
                 "messages are copied from now on", pool);
        pool->reg_ok     = 0;
        pool->reg_failed = 1;
        return NULL;
    }

    *held_p     = UCP_FAILOVER_POOL_REG_SIZE + sizeof(ucp_mem_h);
    pool->held += *held_p;
    ++pool->refcount;
    return buf;
}

uct_mem_h ucp_failover_pool_memh(const void *buf, ucp_md_index_t md_index)
{
    ucp_mem_h memh = *(const ucp_mem_h*)UCS_PTR_BYTE_OFFSET(
            buf, UCP_FAILOVER_POOL_REG_SIZE);

    return (memh->md_map & UCS_BIT(md_index)) ? memh->uct[md_index] :
                                                UCT_MEM_HANDLE_NULL;
}

ucp_failover_pool_t *ucp_failover_pool_create(ucp_worker_h worker,
                                              size_t limit)
{
    size_t sizes[ucs_ilog2(UCP_FAILOVER_POOL_MAX / UCP_FAILOVER_POOL_MIN) + 1];
    ucp_failover_pool_t *pool;
    ucs_status_t status;
    unsigned i;

    pool = ucs_calloc(1, sizeof(*pool), "failover_pool");
    if (pool == NULL) {
        ucs_error("worker %p: no memory for the failover buffer pool",
                  worker);
        return NULL;
    }

    for (i = 0; i < ucs_static_array_size(sizes); ++i) {
        sizes[i] = UCP_FAILOVER_POOL_MIN << i;
    }

    /* 8 buffers a chunk: 1.5 KiB for the smallest, 513 KiB for the
     * largest (a bucket's first chunk is allocated when it is first used,
     * and kept until the worker goes) */
    status = ucs_mpool_set_init(&pool->buffers, sizes,
                                ucs_static_array_size(sizes),
                                UCP_FAILOVER_POOL_MAX, sizeof(pool),
                                UCP_FAILOVER_POOL_SLACK, 0,
                                UCS_SYS_CACHE_LINE_SIZE, 8, UINT_MAX,
                                &ucp_failover_pool_ops, "failover_buffers");
    if (status != UCS_OK) {
        ucs_error("worker %p: cannot create the failover buffer pool: %s",
                  worker, ucs_status_string(status));
        ucs_free(pool);
        return NULL;
    }

    for (i = 0; i < UCS_MPOOL_SET_SIZE; ++i) {
        if (pool->buffers.map[i] != NULL) {
            *(ucp_failover_pool_t**)ucs_mpool_priv(pool->buffers.map[i]) =
                    pool;
        }
    }

    pool->context = (worker != NULL) ? worker->context : NULL;
    if ((pool->context != NULL) &&
        ucp_failover_pool_reg_wanted(pool->context)) {
        /* 16 buffers a chunk; the first when the first is taken */
        status = ucs_mpool_init(&pool->reg, sizeof(pool),
                                UCP_FAILOVER_POOL_REG_SIZE + sizeof(ucp_mem_h),
                                0, UCS_SYS_CACHE_LINE_SIZE, 16, UINT_MAX,
                                &ucp_failover_pool_reg_ops,
                                "failover_reg_buffers");
        if (status == UCS_OK) {
            *(ucp_failover_pool_t**)ucs_mpool_priv(&pool->reg) = pool;
            pool->reg_ok                                       = 1;
        } else {
            /* messages are then copied */
            ucs_diag("worker %p: no registered failover buffers: %s", worker,
                     ucs_status_string(status));
        }
    }

    pool->refcount = 1;
    pool->limit    = limit;
    pool->half     = limit / 2;
    ucs_list_head_init(&pool->waiters);
    return pool;
}

/* The pool holds less than its limit: every waiter is called, in the order
 * they came (a callback may make the pool wait again: a later put calls it) */
void ucp_failover_pool_wake(ucp_failover_pool_t *pool)
{
    ucp_failover_pool_waiter_t *waiter;
    UCS_LIST_HEAD(waking);

    ucs_list_splice_tail(&waking, &pool->waiters);
    ucs_list_head_init(&pool->waiters);
    while (!ucs_list_is_empty(&waking)) {
        waiter          = ucs_list_extract_head(&waking,
                                                ucp_failover_pool_waiter_t,
                                                list);
        waiter->waiting = 0;
        waiter->cb(waiter);
    }
}

void ucp_failover_pool_destroy(ucp_failover_pool_t *pool)
{
    ucs_assertv(pool->held == 0, "pool %p held %zu", pool, pool->held);
    ucs_assert(ucs_list_is_empty(&pool->waiters));
    ucs_mpool_set_cleanup(&pool->buffers, 1);
    if (pool->reg_ok || pool->reg_failed) {
        ucs_mpool_cleanup(&pool->reg, 1);
    }
    ucs_free(pool);
}

/* A buffer of its own: too large for a bucket, or no pool. Its header names
 * the pool it counts in, and looks like a pool element's that names no
 * memory pool (how ucp_failover_pool_put tells them apart) */
typedef struct {
    ucp_failover_pool_t *pool; /* or NULL */
    ucs_mpool_elem_t    elem;  /* elem.mpool == NULL */
} ucp_failover_pool_big_t;

void *ucp_failover_pool_get_slow(ucp_failover_pool_t *pool, size_t size,
                                 size_t *held_p)
{
    ucp_failover_pool_big_t *big;

    UCS_STATIC_ASSERT(sizeof(ucp_failover_pool_big_t) ==
                      sizeof(ucp_failover_pool_t*) + sizeof(ucs_mpool_elem_t));
    big = ucs_malloc(sizeof(*big) + size, "failover_buf");
    if (big == NULL) {
        return NULL;
    }

    big->pool       = pool;
    big->elem.mpool = NULL;
    *held_p         = size;
    if (pool != NULL) {
        pool->held += size;
        ++pool->refcount;
    }
    return big + 1;
}

void ucp_failover_pool_put_slow(void *buf, size_t held)
{
    ucp_failover_pool_big_t *big = ucs_container_of(ucs_mpool_obj_to_elem(buf),
                                                    ucp_failover_pool_big_t,
                                                    elem);
    ucp_failover_pool_t *pool    = big->pool;

    ucs_free(big);
    if (pool == NULL) {
        return;
    }

    pool->held -= held;
    if (!ucs_list_is_empty(&pool->waiters) && (pool->held < pool->limit)) {
        ucp_failover_pool_wake(pool);
    }
    ucp_failover_pool_unref(pool);
}

void ucp_failover_pool_wait(ucp_failover_pool_t *pool,
                            ucp_failover_pool_waiter_t *waiter)
{
    if ((pool == NULL) || waiter->waiting) {
        return;
    }

    waiter->waiting = 1;
    ucs_list_add_tail(&pool->waiters, &waiter->list);
}

void ucp_failover_pool_cancel(ucp_failover_pool_waiter_t *waiter)
{
    if (waiter->waiting) {
        waiter->waiting = 0;
        ucs_list_del(&waiter->list);
    }
}
