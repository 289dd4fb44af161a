/**
 * Copyright (C) Multi-rail failover for UCX authors. 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 */

#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "tcp_zwin.h"

#include <ucs/async/async.h>
#include <ucs/datastruct/array.inl>
#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>
#include <ucs/sys/math.h>
#include <ucs/sys/string.h>
#include <ucs/time/time.h>

#include <sys/socket.h>
#include <netinet/in.h>
#include <linux/tcp.h> /* tcpi_notsent_bytes, tcpi_snd_wnd */
#include <stddef.h>
#include <string.h>


/* Linux's bounds on a window probe's interval (TCP_RTO_MIN, TCP_RTO_MAX) */
#define UCT_TCP_ZWIN_PROBE_MIN_MS 200
#define UCT_TCP_ZWIN_PROBE_MAX_MS 120000

/* Check the connections this often: at most half the user timeout (Linux
 * aborts a retransmission into a closed window once the user timeout has
 * passed since the segment was sent, and a probed window after
 * 200 ms + 400 ms), between 10 ms and 100 ms */
#define UCT_TCP_ZWIN_TICK_MIN_MS  10
#define UCT_TCP_ZWIN_TICK_MAX_MS  100

/* tcpi_state of an established connection (Linux's TCP_ESTABLISHED, which
 * <linux/tcp.h> does not define) */
#define UCT_TCP_ZWIN_ESTABLISHED  1

#define UCT_TCP_ZWIN_HAS(_len, _field) \
    ((_len) >= (offsetof(struct tcp_info, _field) + \
                sizeof(((struct tcp_info*)NULL)->_field)))


typedef struct {
    int fd;
    int cleared; /* TCP_USER_TIMEOUT is off while the window is closed */
} uct_tcp_zwin_conn_t;


UCS_ARRAY_DEFINE_INLINE(uct_tcp_zwin_conns, unsigned, uct_tcp_zwin_conn_t);
UCS_ARRAY_DEFINE_INLINE(uct_tcp_zwin_slots, unsigned, unsigned);


struct uct_tcp_zwin {
    ucs_async_context_t             *async;
    int                             timer_id;
    int                             user_timeout_ms;
    ucs_time_t                      tick;
    ucs_time_t                      next_sweep;
    ucs_array_t(uct_tcp_zwin_conns) conns;    /* the watched sockets */
    ucs_array_t(uct_tcp_zwin_slots) slots;    /* by fd: 1 + its index in
                                                 conns, or 0 */
    unsigned long                   kept;     /* times the option was
                                                 taken off */
    unsigned long                   restored; /* times it was put back */
    char                            name[32];
};


static void uct_tcp_zwin_set(uct_tcp_zwin_t *zwin, uct_tcp_zwin_conn_t *conn,
                             int cleared)
{
    int value = cleared ? 0 : zwin->user_timeout_ms;

    if (setsockopt(conn->fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &value,
                   sizeof(value)) != 0) {
        ucs_debug("tcp %s fd %d: TCP_USER_TIMEOUT=%d failed: %m", zwin->name,
                  conn->fd, value);
        return;
    }

    conn->cleared = cleared;
    if (cleared) {
        ++zwin->kept;
    } else {
        ++zwin->restored;
    }
}

/*
 * Whether the peer's window keeps data back and the peer still answers, i.e.
 * whether TCP_USER_TIMEOUT should be off.
 *
 * The window keeps data back when there is data the kernel may not send
 * (less than a segment of window left), or a retransmission meets a window
 * smaller than a segment. The option comes off already while the window is
 * merely short (a retransmission into a window that closes meanwhile is
 * aborted at the first retransmission timeout, before a later check could
 * act).
 *
 * While the window is open, the peer acknowledges the data in flight within
 * a round trip: it answers if its last acknowledgement is at most the user
 * timeout old. Once the window is shut, Linux sends a window probe (or a
 * retransmission) every max(RTO, 200 ms) << backoff and a live peer answers
 * each within a round trip, except that it answers segments outside its
 * window at most once per net.ipv4.tcp_invalid_ratelimit (500 ms by
 * default), so the probe 400 ms after the first may go unanswered: allow
 * twice the current interval, plus the user timeout.
 */
static int uct_tcp_zwin_keep(uct_tcp_zwin_t *zwin, const struct tcp_info *info,
                             socklen_t len)
{
    uint64_t mss = ucs_max(info->tcpi_snd_mss, 1);
    uint64_t in_flight, left, interval_ms;
    int shut;

    if (!UCT_TCP_ZWIN_HAS(len, tcpi_notsent_bytes)) {
        return 0;
    }

    if (UCT_TCP_ZWIN_HAS(len, tcpi_snd_wnd)) {
        in_flight = (uint64_t)info->tcpi_unacked * mss;
        left      = (info->tcpi_snd_wnd > in_flight) ?
                            (info->tcpi_snd_wnd - in_flight) : 0;
        shut      = info->tcpi_snd_wnd < mss;
        if (!((info->tcpi_notsent_bytes > 0) && (left < mss)) &&
            !((info->tcpi_unacked > 0) && shut)) {
            return 0;
        }
    } else {
        /* before Linux 6.0: nothing in flight and data not sent can only
         * be a window the peer shut (the transport sets TCP_NODELAY) */
        shut = 1;
        if ((info->tcpi_notsent_bytes == 0) || (info->tcpi_unacked > 0)) {
            return 0;
        }
    }

    if (!shut) {
        return info->tcpi_last_ack_recv <= zwin->user_timeout_ms;
    }

    /* a retransmission doubles the RTO itself (and counts the backoff), a
     * window probe shifts the RTO by the backoff */
    interval_ms = ucs_max(info->tcpi_rto / 1000, UCT_TCP_ZWIN_PROBE_MIN_MS);
    if (info->tcpi_unacked == 0) {
        interval_ms <<= ucs_min(info->tcpi_backoff, 10);
    }
    interval_ms = ucs_min(interval_ms, UCT_TCP_ZWIN_PROBE_MAX_MS);
    return info->tcpi_last_ack_recv <=
           ((2 * interval_ms) + zwin->user_timeout_ms);
}

static void uct_tcp_zwin_check(uct_tcp_zwin_t *zwin, uct_tcp_zwin_conn_t *conn)
{
    struct tcp_info info;
    socklen_t len = sizeof(info);
    int keep;

    memset(&info, 0, sizeof(info));
    if (getsockopt(conn->fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) {
        return;
    }

    keep = (info.tcpi_state == UCT_TCP_ZWIN_ESTABLISHED) &&
           uct_tcp_zwin_keep(zwin, &info, len);
    if (conn->cleared == keep) {
        return;
    }

    ucs_debug("tcp %s fd %d: window %u, %u bytes waiting, %u segment(s) in "
              "flight, last ack %u ms ago, rto %u us, backoff %u: "
              "TCP_USER_TIMEOUT %d ms", zwin->name, conn->fd,
              info.tcpi_snd_wnd, info.tcpi_notsent_bytes, info.tcpi_unacked,
              info.tcpi_last_ack_recv, info.tcpi_rto, info.tcpi_backoff,
              conn->cleared ? zwin->user_timeout_ms : 0);
    uct_tcp_zwin_set(zwin, conn, !conn->cleared);
}

static void uct_tcp_zwin_timer(int id, ucs_event_set_types_t events, void *arg)
{
    uct_tcp_zwin_t *zwin = arg;
    uct_tcp_zwin_conn_t *conn;
    ucs_time_t now;

    /* runs with the async context blocked, as add and remove do; in poll
     * mode a timer fires on every poll, so keep to the tick */
    now = ucs_get_time();
    if (now < zwin->next_sweep) {
        return;
    }

    zwin->next_sweep = now + zwin->tick;
    ucs_array_for_each(conn, &zwin->conns) {
        uct_tcp_zwin_check(zwin, conn);
    }
}

ucs_status_t uct_tcp_zwin_create(ucs_async_context_t *async,
                                 int user_timeout_ms, const char *name,
                                 uct_tcp_zwin_t **zwin_p)
{
    uct_tcp_zwin_t *zwin;
    double tick_ms;
    ucs_status_t status;

    zwin = ucs_calloc(1, sizeof(*zwin), "tcp_zwin");
    if (zwin == NULL) {
        return UCS_ERR_NO_MEMORY;
    }

    zwin->async           = async;
    zwin->user_timeout_ms = user_timeout_ms;
    ucs_array_init_dynamic(&zwin->conns);
    ucs_array_init_dynamic(&zwin->slots);
    ucs_strncpy_zero(zwin->name, name, sizeof(zwin->name));

    tick_ms = ucs_min(ucs_max(zwin->user_timeout_ms / 2.0,
                              UCT_TCP_ZWIN_TICK_MIN_MS),
                      UCT_TCP_ZWIN_TICK_MAX_MS);
    /* a timer may fire a little early: sweep at 90 % of the tick or later */
    zwin->tick = ucs_time_from_msec(tick_ms * 0.9);
    status     = ucs_async_add_timer(async->mode, ucs_time_from_msec(tick_ms),
                                     uct_tcp_zwin_timer, zwin, async,
                                     &zwin->timer_id);
    if (status != UCS_OK) {
        ucs_free(zwin);
        return status;
    }

    *zwin_p = zwin;
    return UCS_OK;
}

void uct_tcp_zwin_destroy(uct_tcp_zwin_t *zwin)
{
    ucs_status_t status;

    status = ucs_async_remove_handler(zwin->timer_id, 1);
    if (status != UCS_OK) {
        ucs_warn("tcp %s: failed to remove the zero-window timer: %s",
                 zwin->name, ucs_status_string(status));
    }

    if (zwin->kept > 0) {
        ucs_info("tcp %s: a peer's closed window suspended TCP_USER_TIMEOUT "
                 "%lu time(s), restored %lu time(s)", zwin->name, zwin->kept,
                 zwin->restored);
    }

    ucs_array_cleanup_dynamic(&zwin->conns);
    ucs_array_cleanup_dynamic(&zwin->slots);
    ucs_free(zwin);
}

/* The slot of @a fd (1 + its index in conns, or 0), NULL if the array of
 * slots cannot hold it */
static unsigned *uct_tcp_zwin_slot(uct_tcp_zwin_t *zwin, int fd, int grow)
{
    unsigned length = ucs_array_length(&zwin->slots);

    if ((unsigned)fd >= length) {
        if (!grow ||
            (ucs_array_reserve(uct_tcp_zwin_slots, &zwin->slots,
                               ucs_max(fd + 1, 2 * length)) != UCS_OK)) {
            return NULL;
        }

        memset(ucs_array_begin(&zwin->slots) + length, 0,
               (ucs_array_capacity(&zwin->slots) - length) *
               sizeof(unsigned));
        ucs_array_set_length(&zwin->slots, ucs_array_capacity(&zwin->slots));
    }

    return &ucs_array_elem(&zwin->slots, fd);
}

void uct_tcp_zwin_add(uct_tcp_zwin_t *zwin, int fd)
{
    uct_tcp_zwin_conn_t *conn;
    unsigned *slot;

    if (fd < 0) {
        return;
    }

    UCS_ASYNC_BLOCK(zwin->async);
    slot = uct_tcp_zwin_slot(zwin, fd, 1);
    if ((slot != NULL) && (*slot != 0)) {
        /* watched already: the caller has just set TCP_USER_TIMEOUT */
        ucs_array_elem(&zwin->conns, *slot - 1).cleared = 0;
    } else if ((slot != NULL) &&
               (ucs_array_append(uct_tcp_zwin_conns, &zwin->conns) ==
                UCS_OK)) {
        conn          = ucs_array_last(&zwin->conns);
        conn->fd      = fd;
        conn->cleared = 0;
        *slot         = ucs_array_length(&zwin->conns);
    } else {
        /* the connection keeps the plain TCP_USER_TIMEOUT */
        ucs_diag("tcp %s fd %d: no memory to watch its window", zwin->name,
                 fd);
    }
    UCS_ASYNC_UNBLOCK(zwin->async);
}

/* O(1): the last connection takes the place of the one removed */
void uct_tcp_zwin_remove(uct_tcp_zwin_t *zwin, int fd)
{
    uct_tcp_zwin_conn_t *conn, *last;
    unsigned *slot;

    if (fd < 0) {
        return;
    }

    UCS_ASYNC_BLOCK(zwin->async);
    slot = uct_tcp_zwin_slot(zwin, fd, 0);
    if ((slot != NULL) && (*slot != 0)) {
        conn  = &ucs_array_elem(&zwin->conns, *slot - 1);
        last  = ucs_array_last(&zwin->conns);
        *conn = *last;
        *uct_tcp_zwin_slot(zwin, conn->fd, 0) = *slot;
        *slot = 0;
        ucs_array_set_length(&zwin->conns,
                             ucs_array_length(&zwin->conns) - 1);
    }
    UCS_ASYNC_UNBLOCK(zwin->async);
}
