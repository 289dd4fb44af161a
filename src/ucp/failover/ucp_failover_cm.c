/**
 * Copyright (C) Multi-rail failover for UCX authors. 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 *
 * The CM (client/server) connection of an endpoint is not a data lane. In
 * UCX 1.13 its disconnect is also how a peer's orderly close reaches the
 * other side, and UCT's disconnect callback carries no reason, so a reset of
 * the CM connection alone looks like the peer closing and kills an endpoint
 * whose data lanes are healthy. With failover, a peer that closes says so
 * first (CLOSING on the am lane); a CM disconnect without it is, after a
 * short wait for a CLOSING that races the disconnect over another
 * connection, a lost CM connection, and the endpoint lives on.
 */

#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "ucp_failover.h"
#include "ucp_failover_int.h"

#include <ucp/core/ucp_ep.h>
#include <ucp/core/ucp_ep.inl>
#include <ucp/core/ucp_worker.h>
#include <ucp/wireup/wireup_ep.h>
#include <ucs/debug/log.h>
#include <ucs/time/time.h>


/* How long a CM disconnect waits for a CLOSING, at least */
#define UCP_FAILOVER_CM_CLOSE_WAIT_MIN 1.0


void ucp_failover_ep_close(ucp_ep_h ep)
{
    ucp_failover_ep_t *fo = ucp_failover_ep(ep);

    if (!(fo->flags & UCP_FAILOVER_EP_FLAG_NEGOTIATED) ||
        (ep->flags & UCP_EP_FLAG_FAILED) ||
        (ep->cfg_index == UCP_WORKER_CFG_INDEX_NULL) ||
        !ucp_ep_has_cm_lane(ep)) {
        return;
    }

    /* queued on the am lane before the close flush: it leaves before the
     * CM disconnect is started (which may still arrive first) */
    ucp_failover_wire_send(ep, ucp_ep_get_am_lane(ep), UCP_FAILOVER_MSG_CLOSING,
                           0, NULL, 0);
}

/* The am lane is connected and up: the endpoint can live without its CM */
static int ucp_failover_cm_am_lane_up(ucp_ep_h ep)
{
    uct_ep_h uct_ep = ucp_ep_get_am_uct_ep(ep);

    return (uct_ep != NULL) && !ucp_is_uct_ep_failed(uct_ep) &&
           !ucp_wireup_ep_test(uct_ep);
}

int ucp_failover_cm_disconnected(ucp_ep_h ep)
{
    ucp_failover_ep_t *fo     = ucp_failover_ep(ep);
    ucp_failover_worker_t *fw = ep->worker->failover;
    double wait;

    if ((fw == NULL) || !(fo->flags & UCP_FAILOVER_EP_FLAG_NEGOTIATED) ||
        (fo->flags & UCP_FAILOVER_EP_FLAG_PEER_CLOSING) ||
        (ep->flags & (UCP_EP_FLAG_FAILED | UCP_EP_FLAG_CLOSED)) ||
        (ep->cfg_index == UCP_WORKER_CFG_INDEX_NULL) ||
        !ucp_failover_cm_am_lane_up(ep)) {
        return 0;
    }

    wait = ucs_max(UCP_FAILOVER_CM_CLOSE_WAIT_MIN,
                   2 * ep->worker->context->config.ext.multirail.probe_timeout);
    fo->flags      |= UCP_FAILOVER_EP_FLAG_CM_PENDING;
    fo->cm_deadline = ucs_get_time() + ucs_time_from_sec(wait);
    ucp_failover_round_want(fo); /* the probe rounds decide it */
    ucs_debug("ep %p: CM connection disconnected without a CLOSING from the "
              "peer, waiting %.3f s for one", ep, wait);
    return 1;
}

void ucp_failover_cm_peer_closing(ucp_ep_h ep)
{
    ucp_failover_ep_t *fo = ucp_failover_ep(ep);

    ucs_debug("ep %p: the peer closes the endpoint", ep);
    fo->flags |= UCP_FAILOVER_EP_FLAG_PEER_CLOSING;
    if (!(fo->flags & (UCP_FAILOVER_EP_FLAG_CM_PENDING |
                       UCP_FAILOVER_EP_FLAG_CM_LOST))) {
        return; /* the CM disconnect that follows is handled as stock */
    }

    /* the CM disconnect came first, or the CM was lost before: the peer's
     * close as stock UCX reports it (UCS_ERR_CONNECTION_RESET), and as stock
     * from a later progress call (stock learns of it from the CM's async
     * event), so that what the peer sent before its close, delivered in this
     * call, reaches the application first */
    fo->flags &= ~UCP_FAILOVER_EP_FLAG_CM_PENDING;
    ucp_ep_set_failed_schedule(ep, ucp_ep_get_cm_lane(ep),
                               UCS_ERR_CONNECTION_RESET);
}

int ucp_failover_cm_check(ucp_failover_worker_t *fw, ucp_ep_h ep)
{
    ucp_failover_ep_t *fo = ucp_failover_ep(ep);

    if (!(fo->flags & UCP_FAILOVER_EP_FLAG_CM_PENDING)) {
        return 0;
    } else if (ucs_get_time() < fo->cm_deadline) {
        return 1;
    }

    fo->flags &= ~UCP_FAILOVER_EP_FLAG_CM_PENDING;
    if (ep->flags & UCP_EP_FLAG_FAILED) {
        return 0;
    }

    fo->flags |= UCP_FAILOVER_EP_FLAG_CM_LOST;
    ucs_info("ep %p: the client/server (CM) connection was lost without a "
             "close from the peer; the endpoint continues on its data lanes",
             ep);
    return 0;
}
