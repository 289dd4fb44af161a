/**
 * Copyright (C) Multi-rail failover for UCX authors. 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 */

#ifndef UCT_TCP_ZWIN_H_
#define UCT_TCP_ZWIN_H_

#include <ucs/async/async_fwd.h>
#include <ucs/type/status.h>


/*
 * Zero-window guard of the TCP transport.
 *
 * With TCP_USER_TIMEOUT set, Linux (since 5.11) aborts a connection whose
 * peer keeps its receive window closed for longer than the timeout, even
 * when the peer answers every window probe, and (on a retransmission that
 * meets a closed window) right away. A peer that merely does not read for a
 * while (a compute phase) would lose its connections. The guard watches the
 * connections that carry the option, from an async timer (so it works while
 * the process computes), takes the option off a connection that waits on a
 * closed window of a peer that still answers, and puts it back when the
 * window opens or the answers stop.
 */
typedef struct uct_tcp_zwin uct_tcp_zwin_t;


/**
 * Create a guard for connections with TCP_USER_TIMEOUT @a user_timeout_ms,
 * checking them on a timer of @a async; @a name names it in logs.
 */
ucs_status_t uct_tcp_zwin_create(ucs_async_context_t *async,
                                 int user_timeout_ms, const char *name,
                                 uct_tcp_zwin_t **zwin_p);


void uct_tcp_zwin_destroy(uct_tcp_zwin_t *zwin);


/** Watch connected socket @a fd (which has TCP_USER_TIMEOUT set). */
void uct_tcp_zwin_add(uct_tcp_zwin_t *zwin, int fd);


/** Stop watching @a fd; must be called before the socket is closed. */
void uct_tcp_zwin_remove(uct_tcp_zwin_t *zwin, int fd);

#endif
