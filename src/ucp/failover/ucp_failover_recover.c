/**
 * Copyright (C) Multi-rail failover for UCX authors. 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 *
 * Recovery: a failed lane is re-probed until its rail heals, then brought
 * back. Each failed lane has a re-probe schedule (exponential backoff with a
 * cap, damped when the lane flaps). An attempt creates a new transport
 * endpoint to the peer's interface on the same rail (from copies of the
 * addresses wireup used) and runs a handshake over it:
 *
 *   A (attempt)                                B
 *   new uct_ep ── LANE_UP_REQ(token) ────────▶ lane failed: new uct_ep
 *              ◀──────── LANE_UP_ACK(token) ── (over B's new uct_ep)
 *   both ways work: install the lane,
 *   LANE_UP (am lane) ───────────────────────▶ install the lane
 *
 * A REQ proves the rail from A to B, the ACK from B to A. Both sides may
 * start attempts at once; installing is idempotent. An attempt that gets no
 * answer in time, or whose connection fails, is discarded and the next one
 * waits twice as long.
 *
 * A point-to-point lane (its transport endpoint connects to a peer endpoint,
 * e.g. every lane of a client/server endpoint) first exchanges the new
 * endpoints' addresses over the am lane, then runs the same handshake:
 *
 *   A: new uct_ep ── CONNECT(token, A's ep address) ───▶ B: new uct_ep,
 *      connect to B's ◀── CONNECT_ACK(token, B's address) ── connected to A's
 *      ── LANE_UP_REQ ... as above
 *
 * When both sides send CONNECT at once, the side with the larger worker UUID
 * keeps its attempt and the other answers it.
 */

#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "ucp_failover.h"
#include "ucp_failover_int.h"

#include <ucp/core/ucp_context.h>
#include <ucp/core/ucp_ep.h>
#include <ucp/core/ucp_ep.inl>
#include <ucp/core/ucp_worker.h>
#include <ucp/core/ucp_worker.inl>
#include <ucp/wireup/address.h>
#include <ucp/wireup/wireup.h>
#include <ucs/async/async.h>
#include <ucs/datastruct/string_buffer.h>
#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>
#include <ucs/sys/string.h>
#include <ucs/time/time.h>


/* An attempt's handshake must complete within this long, at least */
#define UCP_FAILOVER_ATTEMPT_TIMEOUT_MIN 1.0

/* Recovery messages logged at info level per second, per worker */
#define UCP_FAILOVER_RECOVER_LOG_RATE    16


#define ucp_failover_recover_log(_fw, _fmt, ...) \
    do { \
        if (ucp_failover_recover_log_allowed(_fw)) { \
            ucs_info(_fmt, ##__VA_ARGS__); \
        } else { \
            ucs_debug(_fmt, ##__VA_ARGS__); \
        } \
    } while (0)


/* A flapping rail on many endpoints must not flood the log */
static int ucp_failover_recover_log_allowed(ucp_failover_worker_t *fw)
{
    ucs_time_t now = ucs_get_time();

    if (fw == NULL) {
        return 1;
    }

    if ((now - fw->log_window) >= ucs_time_from_sec(1.0)) {
        if (fw->log_suppressed > 0) {
            ucs_info("worker %p: %u more lane recovery message(s) in the last "
                     "second (debug level)", fw->worker, fw->log_suppressed);
        }
        fw->log_window     = now;
        fw->log_count      = 0;
        fw->log_suppressed = 0;
    }

    if (fw->log_count < UCP_FAILOVER_RECOVER_LOG_RATE) {
        ++fw->log_count;
        return 1;
    }

    ++fw->log_suppressed;
    return 0;
}

static const ucp_multirail_config_t *ucp_failover_recover_config(ucp_ep_h ep)
{
    return &ep->worker->context->config.ext.multirail;
}

ucp_failover_rec_lane_t *
ucp_failover_rec_lane(ucp_ep_h ep, ucp_lane_index_t lane)
{
    ucp_failover_rec_t *rec = ucp_failover_ep(ep)->rec;

    return ((rec == NULL) || (lane >= UCP_MAX_LANES)) ? NULL :
                                                        &rec->lanes[lane];
}

int ucp_failover_recover_in_flight(ucp_ep_h ep, ucp_lane_index_t lane)
{
    ucp_failover_rec_lane_t *rl = ucp_failover_rec_lane(ep, lane);

    return (rl != NULL) && (rl->uct_ep != NULL);
}

void ucp_failover_recover_lane_info(ucp_ep_h ep, ucp_lane_index_t lane,
                                    ucs_string_buffer_t *strb)
{
    ucp_failover_rec_lane_t *rl = ucp_failover_rec_lane(ep, lane);

    if ((rl == NULL) || ((rl->total_attempts == 0) && (rl->recoveries == 0))) {
        return;
    }

    ucs_string_buffer_appendf(strb, " reprobes:%u recovered:%u",
                              rl->total_attempts, rl->recoveries);
    if (rl->gave_up) {
        ucs_string_buffer_appendf(strb, " gave-up");
    }
}

void ucp_failover_recover_save(ucp_ep_h ep, const ucp_ep_config_key_t *key,
                               const ucp_unpacked_address_t *remote_address,
                               const unsigned *addr_indices)
{
    ucp_failover_ep_t *fo = ucp_failover_ep(ep);
    const ucp_address_entry_t *ae;
    ucp_failover_rec_lane_t *rl;
    ucp_rsc_index_t rsc_index;
    ucp_lane_index_t lane;

    if (ep->worker->failover == NULL) {
        return; /* no rail monitor, no re-probes */
    }

    if (fo->rec == NULL) {
        fo->rec = ucs_calloc(1, sizeof(*fo->rec), "failover_rec");
        if (fo->rec == NULL) {
            ucs_warn("ep %p: no memory for lane recovery, failed lanes stay "
                     "failed", ep);
            return;
        }

        fo->rec->orig_cfg_index = UCP_WORKER_CFG_INDEX_NULL;
    }

    for (lane = 0; lane < key->num_lanes; ++lane) {
        rl       = &fo->rec->lanes[lane];
        rl->ep   = ep;
        rl->lane = lane;
        ucs_assert(rl->uct_ep == NULL);
        ucs_free(rl->addr);
        rl->addr = NULL;

        rsc_index = key->lanes[lane].rsc_index;
        if ((lane == key->cm_lane) || (rsc_index == UCP_NULL_RESOURCE)) {
            continue;
        }

        ae      = &remote_address->address_list[addr_indices[lane]];
        rl->p2p = ucp_wireup_connect_p2p(ep->worker, rsc_index,
                                         ucp_ep_config_key_has_cm_lane(key));
        if ((ae->dev_addr == NULL) || (!rl->p2p && (ae->iface_addr == NULL))) {
            ucs_debug("ep %p: lane[%d] cannot be reconnected if it fails", ep,
                      lane);
            continue;
        }

        rl->addr = ucs_malloc(ae->dev_addr_len + ae->iface_addr_len,
                              "failover_rec_addr");
        if (rl->addr == NULL) {
            continue;
        }

        memcpy(rl->addr, ae->dev_addr, ae->dev_addr_len);
        memcpy(UCS_PTR_BYTE_OFFSET(rl->addr, ae->dev_addr_len),
               ae->iface_addr, ae->iface_addr_len);
        rl->dev_addr_len   = ae->dev_addr_len;
        rl->iface_addr_len = ae->iface_addr_len;
        rl->path_index     = key->lanes[lane].path_index;
    }
}

void ucp_failover_recover_lane_down(ucp_ep_h ep, ucp_lane_index_t lane,
                                    const char *reason, ucs_status_t status)
{
    ucp_failover_ep_t *fo                = ucp_failover_ep(ep);
    const ucp_multirail_config_t *config = ucp_failover_recover_config(ep);
    ucp_failover_rec_lane_t *rl          = ucp_failover_rec_lane(ep, lane);
    ucs_time_t now                       = ucs_get_time();

    if (rl == NULL) {
        return;
    }

    if (fo->failed_lanes == 0) {
        fo->rec->orig_cfg_index = ep->cfg_index;
    }

    /* Damping: a lane that fails again soon after it came back starts from
     * a longer delay each time; one that stayed up for the longest re-probe
     * delay starts afresh */
    if ((rl->restored_at != 0) &&
        ((now - rl->restored_at) <
         ucs_time_from_sec(config->reprobe_max_interval))) {
        ++rl->flaps;
    } else {
        rl->flaps = 0;
    }

    rl->delay = config->reprobe_interval * (double)(1ul << ucs_min(rl->flaps,
                                                                   20));
    rl->delay        = ucs_min(rl->delay, config->reprobe_max_interval);
    rl->failed_at    = now;
    rl->next_attempt = now + ucs_time_from_sec(rl->delay);
    rl->attempts     = 0;
    rl->gave_up      = 0;

    ++rl->failures;
    rl->last_status      = status;
    rl->last_failed_wall = ucs_get_accurate_time();
    ucs_strncpy_zero(rl->last_reason, reason, sizeof(rl->last_reason));
}

/* A LANE_UP_REQ or LANE_UP_ACK about @a lane over @a uct_ep (on its rail),
 * with the number of the last message about the lane sent on the am lane:
 * the handshake may overtake it, and the peer that installs the lane on our
 * answer must then ignore it (a LANE_DOWN from before would fail the lane
 * again on that side only) */
static ucs_status_t ucp_failover_send_on_rail(ucp_ep_h ep, uct_ep_h uct_ep,
                                              ucp_lane_index_t lane,
                                              uint8_t type, uint32_t token)
{
    ucp_failover_msg_t msg;

    ucp_failover_msg_init(ep, lane, type, token, &msg);
    msg.lane_sn = ucp_failover_ep(ep)->tx_lane_sn[lane];
    return ucp_failover_msg_send(ep, lane, uct_ep, &msg);
}

/* The attempt owes the peer messages: send them, or when it can */
static ucs_status_t ucp_failover_attempt_send(ucp_failover_rec_lane_t *rl)
{
    ucs_status_t status;

    if (rl->flags & UCP_FAILOVER_ATTEMPT_SEND_REQ) {
        status = ucp_failover_send_on_rail(rl->ep, rl->uct_ep, rl->lane,
                                           UCP_FAILOVER_MSG_LANE_UP_REQ,
                                           rl->token);
        if (status != UCS_OK) {
            return status;
        }

        rl->flags &= ~UCP_FAILOVER_ATTEMPT_SEND_REQ;
    }

    if (rl->flags & UCP_FAILOVER_ATTEMPT_SEND_ACK) {
        status = ucp_failover_send_on_rail(rl->ep, rl->uct_ep, rl->lane,
                                           UCP_FAILOVER_MSG_LANE_UP_ACK,
                                           rl->ack_token);
        if (status != UCS_OK) {
            return status;
        }

        rl->flags &= ~UCP_FAILOVER_ATTEMPT_SEND_ACK;
    }

    return UCS_OK;
}

static ucs_status_t ucp_failover_attempt_pending_cb(uct_pending_req_t *self)
{
    ucp_failover_rec_lane_t *rl = ucs_container_of(self,
                                                   ucp_failover_rec_lane_t,
                                                   uct);
    ucp_worker_h worker         = rl->ep->worker;
    ucs_status_t status;

    /* rl->flags is also written by the error handler (async thread) */
    UCS_ASYNC_BLOCK(&worker->async);
    status = ucp_failover_attempt_send(rl);
    if (status == UCS_ERR_NO_RESOURCE) {
        UCS_ASYNC_UNBLOCK(&worker->async);
        return UCS_ERR_NO_RESOURCE;
    }

    if (status != UCS_OK) {
        /* the connection error, if any, comes through the error handler;
         * else the attempt times out */
        ucs_debug("ep %p: lane[%d] recovery message not sent: %s", rl->ep,
                  rl->lane, ucs_status_string(status));
        rl->flags &= ~(UCP_FAILOVER_ATTEMPT_SEND_REQ |
                       UCP_FAILOVER_ATTEMPT_SEND_ACK);
    }

    rl->flags &= ~UCP_FAILOVER_ATTEMPT_QUEUED;
    UCS_ASYNC_UNBLOCK(&worker->async);
    return UCS_OK;
}

static void ucp_failover_attempt_kick(ucp_failover_rec_lane_t *rl)
{
    ucs_status_t status;
    int i;

    if (rl->flags & UCP_FAILOVER_ATTEMPT_QUEUED) {
        return; /* the pending callback sends it */
    }

    /* a few rounds: resources may free up between a send and pending_add */
    for (i = 0; i < 4; ++i) {
        status = ucp_failover_attempt_send(rl);
        if (status != UCS_ERR_NO_RESOURCE) {
            if (status != UCS_OK) {
                ucs_debug("ep %p: lane[%d] recovery message not sent: %s",
                          rl->ep, rl->lane, ucs_status_string(status));
            }
            return;
        }

        rl->uct.func = ucp_failover_attempt_pending_cb;
        status       = uct_ep_pending_add(rl->uct_ep, &rl->uct, 0);
        if (status == UCS_OK) {
            rl->flags |= UCP_FAILOVER_ATTEMPT_QUEUED;
            return;
        }
    }
}

static void ucp_failover_attempt_purge_cb(uct_pending_req_t *self, void *arg)
{
    ucp_failover_rec_lane_t *rl = ucs_container_of(self,
                                                   ucp_failover_rec_lane_t,
                                                   uct);

    rl->flags &= ~UCP_FAILOVER_ATTEMPT_QUEUED;
}

static void
ucp_failover_attempt_discarded_cb(void *request, ucs_status_t status,
                                  void *user_data)
{
}

/* Take the attempt's transport endpoint away from the attempt */
static uct_ep_h ucp_failover_attempt_detach(ucp_failover_rec_lane_t *rl)
{
    ucp_failover_worker_t *fw = rl->ep->worker->failover;
    uct_ep_h uct_ep           = rl->uct_ep;
    khiter_t iter;

    if (rl->flags & UCP_FAILOVER_ATTEMPT_QUEUED) {
        /* only then: a purge also drops what the transport queued itself */
        uct_ep_pending_purge(uct_ep, ucp_failover_attempt_purge_cb, NULL);
    }

    if (fw != NULL) {
        iter = kh_get(ucp_failover_attempt_map, &fw->attempts,
                      (uintptr_t)uct_ep);
        if (iter != kh_end(&fw->attempts)) {
            kh_del(ucp_failover_attempt_map, &fw->attempts, iter);
        }
    }

    rl->uct_ep = NULL;
    rl->flags  = 0;
    return uct_ep;
}

static void ucp_failover_lane_desc(ucp_ep_h ep, ucp_lane_index_t lane,
                                   ucs_string_buffer_t *strb)
{
    ucs_string_buffer_appendf(strb, "lane[%d] ", lane);
    ucp_ep_get_lane_info_str(ep, lane, strb);
}

/*
 * Drop the attempt's transport endpoint. One connected to the peer's interface
 * may share its connection with one of the peer's endpoints (UCT/TCP pairs
 * endpoints that two workers create towards each other), which may be the
 * lane the peer has just brought back: a plain destroy stops this side's
 * sending and leaves the peer's traffic alone, where a cancel would reset the
 * connection under it. The attempt carried only recovery messages, so there is
 * nothing of a failed transfer to drop. A point-to-point one, or one whose
 * connection failed, is discarded as a failed lane is.
 */
static void ucp_failover_attempt_discard(ucp_failover_rec_lane_t *rl)
{
    ucp_ep_h ep               = rl->ep;
    ucp_rsc_index_t rsc_index = ucp_ep_get_rsc_index(ep, rl->lane);
    int shared                = !rl->p2p &&
                                !(rl->flags & UCP_FAILOVER_ATTEMPT_FAILED);
    uct_ep_h uct_ep           = ucp_failover_attempt_detach(rl);
    ucs_status_t status;

    if (shared) {
        ucp_ep_unprogress_uct_ep(ep, uct_ep, rsc_index);
        uct_ep_destroy(uct_ep);
        return;
    }

    status = ucp_worker_discard_uct_ep(ep, uct_ep, rsc_index,
                                       UCT_FLUSH_FLAG_CANCEL |
                                       UCP_WORKER_DISCARD_FLAG_NO_FLUSH_OP,
                                       ucp_failover_attempt_purge_cb, NULL,
                                       ucp_failover_attempt_discarded_cb,
                                       NULL);
    if (UCS_STATUS_IS_ERR(status)) {
        /* no memory to discard it the usual way: destroy it now */
        ucp_ep_unprogress_uct_ep(ep, uct_ep, rsc_index);
        uct_ep_destroy(uct_ep);
    }
}

/* An attempt failed: the next one waits longer, or the lane is given up */
static void ucp_failover_attempt_failed(ucp_failover_rec_lane_t *rl,
                                        const char *why)
{
    ucp_ep_h ep                          = rl->ep;
    const ucp_multirail_config_t *config = ucp_failover_recover_config(ep);
    UCS_STRING_BUFFER_ONSTACK(desc, 128);

    rl->delay        = ucs_min(rl->delay * 2, config->reprobe_max_interval);
    rl->next_attempt = ucs_get_time() + ucs_time_from_sec(rl->delay);
    if ((config->reprobe_max_attempts != UCS_ULUNITS_INF) &&
        (rl->attempts >= config->reprobe_max_attempts)) {
        rl->gave_up = 1;
    }

    if ((ep->flags & UCP_EP_FLAG_FAILED) ||
        !ucp_failover_lane_is_failed(ep, rl->lane)) {
        return;
    }

    if (rl->gave_up) {
        ucp_failover_lane_desc(ep, rl->lane, &desc);
        ucp_failover_recover_log(ep->worker->failover,
                                 "ep %p: %s re-probe %u failed (%s), giving "
                                 "up", ep, ucs_string_buffer_cstr(&desc),
                                 rl->attempts, why);
    } else if (ucs_log_is_enabled(UCS_LOG_LEVEL_DEBUG)) {
        /* a re-probe of a rail that has not healed is expected to fail:
         * debug level (the lane's failure and its return are info) */
        ucp_failover_lane_desc(ep, rl->lane, &desc);
        ucs_debug("ep %p: %s re-probe %u failed (%s), retrying later", ep,
                  ucs_string_buffer_cstr(&desc), rl->attempts, why);
    }
}

/* The attempt failed: drop it, and wait longer before the next one */
static void ucp_failover_attempt_abort(ucp_failover_rec_lane_t *rl,
                                       const char *why)
{
    ucp_failover_attempt_discard(rl);
    ucp_failover_attempt_failed(rl, why);
}

/* Send the attempt's endpoint address to the peer, over the am lane */
static ucs_status_t ucp_failover_attempt_send_addr(ucp_failover_rec_lane_t *rl,
                                                   uint8_t type, uint32_t token)
{
    ucp_ep_h ep = rl->ep;
    const uct_iface_attr_t *attr;
    uint8_t addr[UCP_FAILOVER_MSG_ADDR_MAX];
    ucs_status_t status;

    attr = ucp_worker_iface_get_attr(ep->worker,
                                     ucp_ep_get_rsc_index(ep, rl->lane));
    if (attr->ep_addr_len > sizeof(addr)) {
        return UCS_ERR_UNSUPPORTED;
    }

    status = uct_ep_get_address(rl->uct_ep, (uct_ep_addr_t*)addr);
    if (status != UCS_OK) {
        return status;
    }

    ucp_failover_wire_send(ep, rl->lane, type, token, addr, attr->ep_addr_len);
    return UCS_OK;
}

/* Connect the attempt's endpoint to the peer's new endpoint */
static ucs_status_t ucp_failover_attempt_connect(ucp_failover_rec_lane_t *rl,
                                                 const void *peer_ep_addr,
                                                 size_t length)
{
    const uct_iface_attr_t *attr;

    attr = ucp_worker_iface_get_attr(rl->ep->worker,
                                     ucp_ep_get_rsc_index(rl->ep, rl->lane));
    if (length != attr->ep_addr_len) {
        return UCS_ERR_INVALID_PARAM;
    }

    return uct_ep_connect_to_ep(rl->uct_ep, rl->addr, peer_ep_addr);
}

/*
 * Start an attempt: a new transport endpoint on the lane's rail, connected to
 * the peer's interface (or, point-to-point, to come). The initiator sends a
 * LANE_UP_REQ over it (or, point-to-point, first a CONNECT).
 */
static ucs_status_t ucp_failover_attempt_start(ucp_failover_rec_lane_t *rl,
                                               int initiator)
{
    ucp_ep_h ep               = rl->ep;
    ucp_worker_h worker       = ep->worker;
    ucp_failover_worker_t *fw = worker->failover;
    ucp_rsc_index_t rsc_index = ucp_ep_get_rsc_index(ep, rl->lane);
    double timeout;
    ucp_worker_iface_t *wiface;
    uct_ep_params_t params;
    uct_ep_h uct_ep;
    ucs_status_t status;
    khiter_t iter;
    int ret;

    ucs_assert(rl->uct_ep == NULL);
    ucs_assert(rl->addr != NULL);

    wiface = ucp_worker_iface(worker, rsc_index);
    ++rl->attempts;
    ++rl->total_attempts;

    /* a re-probe over a rail that has not healed is expected to fail: the
     * transport logs that at debug level, not as a network failure (the
     * lane's own failures and its return are logged here, at info level;
     * the endpoint keeps the level when it becomes the lane's) */
    params.field_mask    = UCT_EP_PARAM_FIELD_IFACE |
                           UCT_EP_PARAM_FIELD_PATH_INDEX |
                           UCT_EP_PARAM_FIELD_FAILURE_LEVEL;
    params.iface         = wiface->iface;
    params.path_index    = rl->path_index;
    params.failure_level = UCS_LOG_LEVEL_DEBUG;
    if (!rl->p2p) {
        /* connected to the peer's interface at once */
        params.field_mask |= UCT_EP_PARAM_FIELD_DEV_ADDR |
                             UCT_EP_PARAM_FIELD_IFACE_ADDR;
        params.dev_addr    = rl->addr;
        params.iface_addr  = UCS_PTR_BYTE_OFFSET(rl->addr, rl->dev_addr_len);
    }

    status = uct_ep_create(&params, &uct_ep);
    if (status != UCS_OK) {
        return status;
    }

    iter = kh_put(ucp_failover_attempt_map, &fw->attempts, (uintptr_t)uct_ep,
                  &ret);
    if (ret == UCS_KH_PUT_FAILED) {
        uct_ep_destroy(uct_ep);
        return UCS_ERR_NO_MEMORY;
    }

    kh_value(&fw->attempts, iter) = rl;
    ucp_worker_iface_progress_ep(wiface);

    timeout      = ucs_max(UCP_FAILOVER_ATTEMPT_TIMEOUT_MIN,
                           2 * ucp_failover_recover_config(ep)->probe_timeout);
    rl->uct_ep   = uct_ep;
    rl->deadline = ucs_get_time() + ucs_time_from_sec(timeout);
    rl->flags    = 0;
    ucs_debug("ep %p: lane[%d] re-probe %u: uct_ep %p%s", ep, rl->lane,
              rl->attempts, uct_ep, initiator ? "" : " (answering the peer)");
    if (!initiator) {
        return UCS_OK;
    }

    rl->token = ++fw->token_seq;
    if (rl->p2p) {
        /* the peer connects a new endpoint of its own to this one's
         * address and answers with its address */
        status = ucp_failover_attempt_send_addr(rl, UCP_FAILOVER_MSG_CONNECT,
                                                rl->token);
        if (status != UCS_OK) {
            rl->flags |= UCP_FAILOVER_ATTEMPT_FAILED;
            return UCS_OK; /* dropped by the next round */
        }

        rl->flags |= UCP_FAILOVER_ATTEMPT_AWAIT;
        return UCS_OK;
    }

    rl->flags |= UCP_FAILOVER_ATTEMPT_SEND_REQ;
    ucp_failover_attempt_kick(rl);
    return UCS_OK;
}


/*
 * The rail works both ways: the attempt's transport endpoint becomes the
 * lane's, and the lane takes back its roles, from the configuration the
 * endpoint had before any lane failed, without the lanes still failed.
 */
static void ucp_failover_lane_up(ucp_failover_rec_lane_t *rl)
{
    ucp_ep_h ep               = rl->ep;
    ucp_worker_h worker       = ep->worker;
    ucp_failover_ep_t *fo     = ucp_failover_ep(ep);
    ucp_failover_worker_t *fw = worker->failover;
    ucp_lane_map_t remaining  = fo->failed_lanes & ~UCS_BIT(rl->lane);
    UCS_STRING_BUFFER_ONSTACK(desc, 128);
    UCS_STRING_BUFFER_ONSTACK(moved, 256);
    ucp_worker_cfg_index_t cfg_index;
    ucp_ep_config_key_t key;
    ucs_status_t status;
    uct_ep_h uct_ep;
    int ret;

    UCP_WORKER_THREAD_CS_CHECK_IS_BLOCKED(worker);
    ucs_assert(fo->failed_lanes & UCS_BIT(rl->lane));

    if (fo->rec->orig_cfg_index == UCP_WORKER_CFG_INDEX_NULL) {
        ucp_failover_attempt_abort(rl, "no configuration to return to");
        return;
    }

    /* the am lane stays where it is: moving it back would let new ordered
     * messages overtake those still in flight on the current one */
    key = worker->ep_config[fo->rec->orig_cfg_index].key;
    ucp_failover_key_set_am_lane(&key, ucp_ep_get_am_lane(ep), NULL);
    ucp_failover_key_remove_lanes(ep->worker, &key, remaining, &moved);
    status = ucp_worker_get_ep_config(worker, &key, 0, &cfg_index);
    if (status != UCS_OK) {
        ucp_failover_attempt_abort(rl, ucs_status_string(status));
        return;
    }

    uct_ep                = ucp_failover_attempt_detach(rl);
    ep->uct_eps[rl->lane] = uct_ep;
    ep->cfg_index         = cfg_index;
    fo->failed_lanes      = remaining;
    rl->restored_at       = ucs_get_time();
    ++rl->recoveries;
    ++fo->num_recoveries;

    /* a lane back in the am_bw lanes carries its data stream again */
    ucp_failover_seq_ep_connected(ep);

    ucp_failover_lane_desc(ep, rl->lane, &desc);
    ucp_failover_log_lane_event(worker, ucp_ep_get_rsc_index(ep, rl->lane), 1);
    ucs_log(ucp_failover_log_level(worker),
            "ep %p: %s is back after %u re-probe(s), %.3f s down; it carries "
            "its roles again", ep, ucs_string_buffer_cstr(&desc),
            rl->attempts, ucs_time_to_sec(rl->restored_at - rl->failed_at));
    ucp_failover_log_level_reset(worker);

    /* the rail works: its other failed lanes to the peer try at once */
    kh_put(ucp_failover_rail_set, &fw->healed_rails,
           ucp_failover_rail_key(ucp_ep_get_rsc_index(ep, rl->lane),
                                 fo->peer_uuid),
           &ret);
    ucp_failover_probe_schedule(fw);
}

/* Answer a LANE_UP_REQ for a lane that is up here: over the lane itself */
static void ucp_failover_recover_ack_up_lane(ucp_ep_h ep,
                                             ucp_lane_index_t lane,
                                             uint32_t token)
{
    ucs_status_t status;

    status = ucp_failover_send_on_rail(ep, ep->uct_eps[lane], lane,
                                       UCP_FAILOVER_MSG_LANE_UP_ACK, token);
    if (status != UCS_OK) {
        /* the peer's attempt times out and it tries again */
        ucs_debug("ep %p: lane[%d] is up, LANE_UP_ACK not sent: %s", ep, lane,
                  ucs_status_string(status));
    }
}

/*
 * The peer starts a point-to-point attempt: connect a new endpoint to its
 * new endpoint, and answer with this one's address.
 */
static void ucp_failover_recover_connect(ucp_ep_h ep, ucp_lane_index_t lane,
                                         const ucp_failover_msg_t *msg,
                                         const void *addr)
{
    ucp_failover_rec_lane_t *rl = ucp_failover_rec_lane(ep, lane);
    ucs_status_t status;

    if (!rl->p2p || (rl->addr == NULL)) {
        ucs_diag("ep %p: lane[%d] cannot be reconnected from this side", ep,
                 lane);
        goto refuse;
    }

    if (ep->worker->failover->link_down[ucp_ep_get_rsc_index(ep, lane)]) {
        /* the device is down here: connecting could only fail (RC logs it
         * as an error); our link-up event starts an attempt */
        ucs_debug("ep %p: lane[%d] CONNECT while its device is down here, "
                  "refused", ep, lane);
        goto refuse;
    }

    if (!ucp_failover_lane_is_failed(ep, rl->lane)) {
        /* the peer lost its side of the connection: so did we */
        if (!ucp_failover_lane_can_fail(ep, rl->lane)) {
            goto refuse;
        }

        if (ucp_failover_lane_down(ep, rl->lane, "peer reconnects it",
                                   UCS_OK, 0) != UCS_OK) {
            goto refuse; /* the endpoint fails (no configuration left) */
        }
    }

    if (rl->uct_ep != NULL) {
        if ((rl->flags & UCP_FAILOVER_ATTEMPT_AWAIT) &&
            (ep->worker->uuid > msg->sender_uuid)) {
            /* both sides started: the peer answers ours */
            ucs_debug("ep %p: lane[%d] crossing CONNECT, keeping ours", ep,
                      rl->lane);
            return;
        }

        ucp_failover_attempt_discard(rl);
    }

    if (rl->gave_up) {
        goto refuse;
    }

    status = ucp_failover_attempt_start(rl, 0);
    if (status != UCS_OK) {
        goto refuse;
    }

    status = ucp_failover_attempt_connect(rl, addr, msg->addr_len);
    if (status == UCS_OK) {
        status = ucp_failover_attempt_send_addr(rl,
                                                UCP_FAILOVER_MSG_CONNECT_ACK,
                                                msg->token);
    }

    if (status == UCS_OK) {
        return;
    }

    ucp_failover_attempt_abort(rl, ucs_status_string(status));

refuse:
    /* an answer without an address: the peer drops its attempt now rather
     * than when it times out */
    ucp_failover_wire_send(ep, lane, UCP_FAILOVER_MSG_CONNECT_ACK, msg->token,
                           NULL, 0);
}

void ucp_failover_recover_msg(ucp_ep_h ep, ucp_lane_index_t lane,
                              const ucp_failover_msg_t *msg, const void *addr)
{
    ucp_failover_rec_lane_t *rl = ucp_failover_rec_lane(ep, lane);
    int failed                  = ucp_failover_lane_is_failed(ep, lane);
    ucs_status_t status;

    ucs_debug("ep %p: lane[%d] (%s) recovery message %d token %u", ep, lane,
              ucp_failover_lane_state_str(ep, lane), msg->type, msg->token);

    if ((rl == NULL) || (ep->worker->failover == NULL) ||
        !(ucp_failover_ep(ep)->flags & UCP_FAILOVER_EP_FLAG_NEGOTIATED) ||
        (ep->flags & UCP_EP_FLAG_CLOSED)) {
        /* a closing endpoint takes no lane back; the peer's attempt ends
         * unanswered */
        return;
    }

    switch (msg->type) {
    case UCP_FAILOVER_MSG_CONNECT:
        ucp_failover_recover_connect(ep, lane, msg, addr);
        break;
    case UCP_FAILOVER_MSG_CONNECT_ACK:
        if (!failed || (rl->uct_ep == NULL) || (msg->token != rl->token) ||
            !(rl->flags & UCP_FAILOVER_ATTEMPT_AWAIT)) {
            ucs_debug("ep %p: lane[%d] stale CONNECT_ACK(token %u)", ep, lane,
                      msg->token);
            return;
        }

        if (msg->addr_len == 0) {
            ucp_failover_attempt_abort(rl, "the peer could not connect");
            return;
        }

        rl->flags &= ~UCP_FAILOVER_ATTEMPT_AWAIT;
        status     = ucp_failover_attempt_connect(rl, addr, msg->addr_len);
        if (status != UCS_OK) {
            ucp_failover_attempt_abort(rl, ucs_status_string(status));
            return;
        }

        rl->flags |= UCP_FAILOVER_ATTEMPT_SEND_REQ;
        ucp_failover_attempt_kick(rl);
        break;
    case UCP_FAILOVER_MSG_LANE_UP_REQ:
        if (!failed) {
            if (!ucp_is_uct_ep_failed(ep->uct_eps[lane])) {
                /* the peer re-probes: what it said about the lane before
                 * (its LANE_DOWN, perhaps still behind data on the am lane)
                 * is over; if our answer does not reach it, our side
                 * finds out from its transport */
                ucp_failover_wire_superseded(ep, lane, msg->lane_sn);
                ucp_failover_recover_ack_up_lane(ep, lane, msg->token);
            }
            return;
        }

        if (rl->addr == NULL) {
            ucs_diag("ep %p: lane[%d] cannot be reconnected from this side",
                     ep, lane);
            return;
        }

        if (rl->gave_up && (rl->uct_ep == NULL)) {
            /* given up here: the peer's attempts end unanswered */
            return;
        }

        if (rl->flags & UCP_FAILOVER_ATTEMPT_AWAIT) {
            /* our endpoint is not connected yet: a request from an earlier
             * pair */
            return;
        }

        if (rl->uct_ep == NULL) {
            if (rl->p2p) {
                /* a request over an endpoint pair that is gone */
                return;
            }

            /* the peer reached us over the rail: answer over it, at once */
            if (ucp_failover_attempt_start(rl, 0) != UCS_OK) {
                return;
            }
        }

        rl->ack_token = msg->token;
        rl->flags    |= UCP_FAILOVER_ATTEMPT_SEND_ACK;
        ucp_failover_attempt_kick(rl);
        break;
    case UCP_FAILOVER_MSG_LANE_UP_ACK:
        if (!failed || (rl->uct_ep == NULL) || (msg->token != rl->token) ||
            (rl->flags & (UCP_FAILOVER_ATTEMPT_FAILED |
                          UCP_FAILOVER_ATTEMPT_AWAIT))) {
            ucs_debug("ep %p: lane[%d] stale LANE_UP_ACK(token %u)", ep, lane,
                      msg->token);
            return;
        }

        ucp_failover_lane_up(rl);
        if (!ucp_failover_lane_is_failed(ep, lane)) {
            /* what the peer said about the lane before it answered is
             * stale, however late it comes */
            ucp_failover_wire_superseded(ep, lane, msg->lane_sn);
            ucp_failover_wire_send(ep, lane, UCP_FAILOVER_MSG_LANE_UP, 0, NULL,
                                   0);
        }
        break;
    case UCP_FAILOVER_MSG_LANE_UP:
        if (!failed) {
            return;
        }

        if ((rl->uct_ep != NULL) &&
            !(rl->flags & (UCP_FAILOVER_ATTEMPT_FAILED |
                           UCP_FAILOVER_ATTEMPT_AWAIT))) {
            ucp_failover_lane_up(rl);
        } else if (!rl->gave_up && (rl->uct_ep == NULL)) {
            /* our side of the rail is not connected: connect it now */
            rl->next_attempt = ucs_get_time();
            ucp_failover_probe_schedule(ep->worker->failover);
        }
        break;
    }
}

void ucp_failover_recover_round_begin(ucp_failover_worker_t *fw)
{
    ucp_failover_rec_lane_t *rl;
    ucp_rsc_index_t rsc_index;

    /* A device held down is looked at again each round (one query per such
     * device, none while every device is up): its link-up event may have
     * been lost (netlink overrun) */
    for (rsc_index = 0; rsc_index < fw->worker->context->num_tls;
         ++rsc_index) {
        if (fw->link_down[rsc_index] &&
            !ucp_failover_link_is_down(fw->netdev[rsc_index])) {
            fw->link_down[rsc_index] = 0;
        }
    }

    /* one attempt per rail to a peer at a time, until one succeeds */
    kh_clear(ucp_failover_rail_set, &fw->busy_rails);
    kh_foreach_value(&fw->attempts, rl, {
        int ret;
        kh_put(ucp_failover_rail_set, &fw->busy_rails,
               ucp_failover_rail_key(ucp_ep_get_rsc_index(rl->ep, rl->lane),
                                     ucp_failover_ep(rl->ep)->peer_uuid),
               &ret);
    });
}

void ucp_failover_recover_round_end(ucp_failover_worker_t *fw)
{
    kh_clear(ucp_failover_rail_set, &fw->healed_rails);
    memset(fw->up_events, 0, sizeof(fw->up_events));
}

static int ucp_failover_rail_in(khash_t(ucp_failover_rail_set) *set,
                                uint64_t key)
{
    return kh_get(ucp_failover_rail_set, set, key) != kh_end(set);
}

int ucp_failover_recover_ep(ucp_failover_worker_t *fw, ucp_ep_h ep)
{
    ucp_failover_ep_t *fo = ucp_failover_ep(ep);
    ucp_failover_rec_lane_t *rl;
    ucp_rsc_index_t rsc_index;
    ucs_status_t status;
    ucp_lane_index_t lane;
    uint64_t rail;
    ucs_time_t now;
    int ep_ok, healed, ret;

    /* attempts exist only for failed lanes (healthy endpoints are not in
     * the rounds' list for recovery) */
    if ((fo->rec == NULL) || (fo->failed_lanes == 0)) {
        return 0;
    }

    now   = ucs_get_time();
    ep_ok = (fo->flags & UCP_FAILOVER_EP_FLAG_NEGOTIATED) &&
            !(ep->flags & (UCP_EP_FLAG_FAILED | UCP_EP_FLAG_CLOSED)) &&
            (ep->cfg_index != UCP_WORKER_CFG_INDEX_NULL);

    ucs_for_each_bit(lane, fo->failed_lanes) {
        rl = &fo->rec->lanes[lane];
        if (rl->uct_ep != NULL) {
            if (!ep_ok) {
                ucp_failover_attempt_abort(rl, "endpoint closed or failed");
            } else if (rl->flags & UCP_FAILOVER_ATTEMPT_FAILED) {
                ucp_failover_attempt_abort(rl, "connection failed");
            } else if (now >= rl->deadline) {
                ucp_failover_attempt_abort(rl, "no answer");
            }
            continue;
        }

        if (!ep_ok || (rl->addr == NULL) || rl->gave_up) {
            continue;
        }

        rsc_index = ucp_ep_get_rsc_index(ep, lane);
        rail      = ucp_failover_rail_key(rsc_index, fo->peer_uuid);
        healed    = ucp_failover_rail_in(&fw->healed_rails, rail);
        if (fw->up_events[rsc_index] && (rl->flaps == 0)) {
            /* the link came back: try now, unless the lane flaps */
            rl->next_attempt = now;
        }

        if (!healed && ((now < rl->next_attempt) ||
                        ucp_failover_rail_in(&fw->busy_rails, rail))) {
            continue;
        }

        if (fw->link_down[rsc_index]) {
            /* the device is down here: its link-up event re-probes */
            continue;
        }

        kh_put(ucp_failover_rail_set, &fw->busy_rails, rail, &ret);
        status = ucp_failover_attempt_start(rl, 1);
        if (status != UCS_OK) {
            ucp_failover_attempt_failed(rl, ucs_status_string(status));
        }
    }

    return 1; /* until no lane is failed */
}

int ucp_failover_uct_ep_error(ucp_worker_h worker, uct_ep_h uct_ep,
                              ucs_status_t status)
{
    ucp_failover_worker_t *fw = worker->failover;
    ucp_failover_rec_lane_t *rl;
    khiter_t iter;

    if (fw == NULL) {
        return 0;
    }

    iter = kh_get(ucp_failover_attempt_map, &fw->attempts, (uintptr_t)uct_ep);
    if (iter == kh_end(&fw->attempts)) {
        return 0;
    }

    /* dropped from the next probe round, outside the transport's callback */
    rl         = kh_value(&fw->attempts, iter);
    rl->flags |= UCP_FAILOVER_ATTEMPT_FAILED;
    ucs_debug("ep %p: lane[%d] re-probe connection failed: %s", rl->ep,
              rl->lane, ucs_status_string(status));
    ucp_failover_probe_schedule(fw);
    return 1;
}

void ucp_failover_ep_destroy(ucp_ep_h ep)
{
    ucp_failover_ep_t *fo = ucp_failover_ep(ep);
    ucp_failover_rec_lane_t *rl;
    ucp_lane_index_t lane;
    uct_ep_h uct_ep;

    ucp_failover_worker_ep_remove(ep);
    ucp_failover_seq_cleanup(ep);
    ucp_failover_log_ep_gone(ep->worker, ucs_popcount(fo->failed_lanes),
                             fo->num_redriven);
    if (fo->rec == NULL) {
        return;
    }

    UCS_ASYNC_BLOCK(&ep->worker->async);
    for (lane = 0; lane < UCP_MAX_LANES; ++lane) {
        rl = &fo->rec->lanes[lane];
        if (rl->uct_ep != NULL) {
            uct_ep = ucp_failover_attempt_detach(rl);
            ucp_ep_unprogress_uct_ep(ep, uct_ep,
                                     ucp_ep_get_rsc_index(ep, lane));
            uct_ep_destroy(uct_ep);
        }

        ucs_free(rl->addr);
    }

    ucs_free(fo->rec);
    fo->rec = NULL;
    UCS_ASYNC_UNBLOCK(&ep->worker->async);
}

void ucp_failover_recover_init(ucp_failover_worker_t *fw)
{
    kh_init_inplace(ucp_failover_attempt_map, &fw->attempts);
    kh_init_inplace(ucp_failover_rail_set, &fw->busy_rails);
    kh_init_inplace(ucp_failover_rail_set, &fw->healed_rails);
}

void ucp_failover_recover_cleanup(ucp_failover_worker_t *fw)
{
    /* endpoints outlive the monitor in ucp_worker_destroy(): their attempts
     * are destroyed with them, without the map */
    kh_destroy_inplace(ucp_failover_attempt_map, &fw->attempts);
    kh_destroy_inplace(ucp_failover_rail_set, &fw->busy_rails);
    kh_destroy_inplace(ucp_failover_rail_set, &fw->healed_rails);
}
