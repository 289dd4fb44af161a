/**
 * Copyright (C) Multi-rail failover for UCX authors. 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 *
 * Lane state and lane failover: a failed lane is marked FAILED, its UCT
 * endpoint is discarded, its roles move to surviving lanes through a new
 * endpoint configuration, and the requests pending on it are replayed there.
 */

#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "ucp_failover.h"
#include "ucp_failover_int.h"

#include <ucp/core/ucp_ep.h>
#include <ucp/core/ucp_ep.inl>
#include <ucp/core/ucp_request.h>
#include <ucp/core/ucp_worker.h>
#include <ucp/core/ucp_worker.inl>
#include <ucp/wireup/address.h>
#include <ucp/wireup/wireup.h>
#include <ucp/wireup/wireup_ep.h>
#include <ucs/debug/log.h>
#include <ucs/datastruct/string_buffer.h>


/* (zero: no lane failed, nothing negotiated; in read-only memory) */
const ucp_failover_ep_t ucp_failover_ep_inactive = {0};


/*
 * Multi-fragment eager/AM data (and rendezvous data sent as AM fragments)
 * is striped over the am_bw lanes. Over TCP a fragment "completes" when it
 * is in the socket buffer, so the fragments a silent fault strands on a
 * non-am lane would be lost. Each such lane is sequenced as a data stream
 * (ucp_failover_seq.c), which keeps a copy of every fragment until the peer
 * acknowledges it and sends it again on the am lane after the lane fails.
 * That copy may have to go on any lane that can become the am lane, so the
 * fragments stripe only when every lane has the same active-message limits;
 * otherwise they ride the am lane ("pinned": every am_bw slot holds the am
 * lane, so positions stay and a request's am_bw_index keeps meaning).
 */
static void ucp_failover_key_pin_am_bw(ucp_ep_config_key_t *key)
{
    int i;

    for (i = 0; (i < UCP_MAX_LANES) && (key->am_bw_lanes[i] != UCP_NULL_LANE);
         ++i) {
        key->am_bw_lanes[i] = key->am_lane;
    }
}

/*
 * Hardware tag matching (RC/DC tag offload, UCX_RC_MLX5_TM_ENABLE=y) sends
 * tagged messages with the transport's tag operations, past the sequencing
 * of the am lane, and the NIC delivers them into posted buffers where a
 * duplicate cannot be dropped. A failover endpoint matches tags in software,
 * over its am lane. The lane keeps its other roles.
 */
static void ucp_failover_key_drop_tag_lane(ucp_ep_h ep,
                                           ucp_ep_config_key_t *key)
{
    if (key->tag_lane == UCP_NULL_LANE) {
        return;
    }

    ucs_debug("ep %p: lane[%d] not used for tag offload (failover)", ep,
              key->tag_lane);
    key->lanes[key->tag_lane].lane_types &= ~UCS_BIT(UCP_LANE_TYPE_TAG);
    key->tag_lane                         = UCP_NULL_LANE;
}

/* Whether every am_bw slot of @a key holds its am lane */
static int ucp_failover_key_am_bw_pinned(const ucp_ep_config_key_t *key)
{
    int i;

    for (i = 0; (i < UCP_MAX_LANES) && (key->am_bw_lanes[i] != UCP_NULL_LANE);
         ++i) {
        if (key->am_bw_lanes[i] != key->am_lane) {
            return 0;
        }
    }

    return 1;
}

/* Whether active-message fragments may stripe over the lanes of @a key: all
 * its lanes that send active messages have the same limits */
static int ucp_failover_key_can_stripe(ucp_worker_h worker,
                                       const ucp_ep_config_key_t *key)
{
    const uint64_t am_flags = UCT_IFACE_FLAG_AM_SHORT |
                              UCT_IFACE_FLAG_AM_BCOPY |
                              UCT_IFACE_FLAG_AM_ZCOPY;
    const uct_iface_attr_t *attr, *first = NULL;
    ucp_lane_index_t lane;

    if (worker->context->config.ext.multirail.stripe_am == UCS_NO) {
        return 0;
    }

    for (lane = 0; lane < key->num_lanes; ++lane) {
        if ((lane == key->cm_lane) ||
            (key->lanes[lane].rsc_index == UCP_NULL_RESOURCE)) {
            continue;
        }

        attr = ucp_worker_iface_get_attr(worker, key->lanes[lane].rsc_index);
        if (!(attr->cap.flags & am_flags)) {
            continue;
        }

        if (first == NULL) {
            first = attr;
        } else if (((attr->cap.flags & am_flags) !=
                    (first->cap.flags & am_flags)) ||
                   (attr->cap.am.max_short != first->cap.am.max_short) ||
                   (attr->cap.am.max_bcopy != first->cap.am.max_bcopy) ||
                   (attr->cap.am.max_zcopy != first->cap.am.max_zcopy) ||
                   (attr->cap.am.max_hdr != first->cap.am.max_hdr) ||
                   (attr->cap.am.max_iov != first->cap.am.max_iov)) {
            return 0;
        }
    }

    return 1;
}

void ucp_failover_key_set_am_lane(ucp_ep_config_key_t *key,
                                  ucp_lane_index_t am_lane,
                                  ucs_string_buffer_t *strb)
{
    ucp_lane_index_t old_am_lane = key->am_lane;
    int pinned;

    if (old_am_lane == am_lane) {
        return;
    }

    if (strb != NULL) {
        ucs_string_buffer_appendf(strb, " am:%d->%d", old_am_lane, am_lane);
    }

    /* pinned am_bw slots follow the am lane (ucp_failover_key_pin_am_bw);
     * striped ones stay: the old am lane is a failed lane, which
     * ucp_failover_key_remove_lanes() replaces, or a recovered one, which
     * becomes a data lane */
    pinned       = ucp_failover_key_am_bw_pinned(key);
    key->am_lane = am_lane;
    if (key->wireup_msg_lane == old_am_lane) {
        key->wireup_msg_lane = am_lane;
    }

    if (key->am_bw_lanes[0] == UCP_NULL_LANE) {
        key->am_bw_lanes[0] = am_lane;
    }

    if (pinned) {
        ucp_failover_key_pin_am_bw(key);
    }
}

/*
 * The rma lanes all failed: the RMA API would go over the software protocol
 * (active messages on the am lane) while lanes that put and get remain. The
 * first lane left whose interface puts and gets as UCP asks of an rma lane
 * (short and bcopy; zero copy where it has it) takes the role: on RDMA
 * rails, the other device's lane. A lane that comes back brings the
 * endpoint's own selection back.
 */
static void ucp_failover_key_rma_survivor(ucp_worker_h worker,
                                          ucp_ep_config_key_t *key,
                                          ucp_lane_map_t failed,
                                          ucs_string_buffer_t *strb)
{
    const uint64_t flags = UCT_IFACE_FLAG_PUT_SHORT |
                           UCT_IFACE_FLAG_PUT_BCOPY |
                           UCT_IFACE_FLAG_GET_BCOPY;
    const uct_iface_attr_t *attr;
    ucp_lane_index_t lane;

    for (lane = 0; lane < key->num_lanes; ++lane) {
        if ((failed & UCS_BIT(lane)) || (lane == key->cm_lane) ||
            (key->lanes[lane].rsc_index == UCP_NULL_RESOURCE)) {
            continue;
        }

        attr = ucp_worker_iface_get_attr(worker, key->lanes[lane].rsc_index);
        if (ucs_test_all_flags(attr->cap.flags, flags)) {
            key->rma_lanes[0] = lane;
            ucs_string_buffer_appendf(strb, " rma:->%d", lane);
            return;
        }
    }
}

void ucp_failover_ep_negotiate(ucp_ep_h ep, ucp_ep_config_key_t *key,
                               const ucp_unpacked_address_t *remote_address,
                               const unsigned *addr_indices)
{
    ucp_failover_ep_t *fo = ucp_failover_ep(ep);
    UCS_STRING_BUFFER_ONSTACK(strb, 128);
    const ucp_address_entry_t *ae;
    ucp_lane_index_t lane;
    unsigned peer_version;

    if (fo->failed_lanes != 0) {
        /* a connected endpoint keeps its failed lanes failed, and its am
         * lane */
        if (!(fo->flags & UCP_FAILOVER_EP_FLAG_STRIPE)) {
            ucp_failover_key_pin_am_bw(key);
        }
        ucp_failover_key_drop_tag_lane(ep, key);
        if (ep->cfg_index != UCP_WORKER_CFG_INDEX_NULL) {
            ucp_failover_key_set_am_lane(key, ucp_ep_get_am_lane(ep), NULL);
        }
        ucp_failover_key_remove_lanes(ep->worker, key, fo->failed_lanes,
                                      &strb);
        ucs_debug("ep %p: re-selected lanes without failed lanes 0x%x:%s", ep,
                  fo->failed_lanes, ucs_string_buffer_cstr(&strb));
        return;
    }

    if (!ucp_failover_is_enabled(ep->worker->context)) {
        return; /* (the shared inactive state) */
    }

    fo->flags &= ~UCP_FAILOVER_EP_FLAG_NEGOTIATED;
    if ((ep->flags & UCP_EP_FLAG_INTERNAL) || (addr_indices == NULL)) {
        return;
    }

    for (lane = 0; lane < key->num_lanes; ++lane) {
        if (lane == key->cm_lane) {
            continue;
        }

        ae = &remote_address->address_list[addr_indices[lane]];
        if (!(ae->iface_attr.flags & UCP_ADDR_IFACE_FLAG_FAILOVER)) {
            ucs_debug("ep %p: peer interface of lane[%d] does not run "
                      "multi-rail failover, endpoint behaves as stock", ep,
                      lane);
            return;
        }

        peer_version = ((ae->iface_attr.flags >>
                         UCP_ADDR_IFACE_FAILOVER_VER_SHIFT) &
                        UCP_ADDR_IFACE_FAILOVER_VER_MASK) + 1;
        if (peer_version != UCP_FAILOVER_WIRE_VERSION) {
            ucs_diag("ep %p: peer %s runs multi-rail failover wire version "
                     "%u, this library %u: endpoint behaves as stock", ep,
                     ucp_ep_peer_name(ep), peer_version,
                     UCP_FAILOVER_WIRE_VERSION);
            return;
        }
    }

    fo->flags    |= UCP_FAILOVER_EP_FLAG_NEGOTIATED;
    fo->peer_uuid = remote_address->uuid;
    ucp_failover_worker_ep_add(ep);
    if (ucp_failover_key_can_stripe(ep->worker, key)) {
        fo->flags |= UCP_FAILOVER_EP_FLAG_STRIPE;
    } else {
        fo->flags &= ~UCP_FAILOVER_EP_FLAG_STRIPE;
        ucp_failover_key_pin_am_bw(key);
    }
    ucp_failover_key_drop_tag_lane(ep, key);
    ucp_failover_recover_save(ep, key, remote_address, addr_indices);
    ucs_debug("ep %p: multi-rail failover negotiated with the peer", ep);
}

void ucp_failover_ep_set_peer_lanes(ucp_ep_h ep,
                                    const ucp_lane_index_t *lanes2remote)
{
    ucp_failover_ep_t *fo = ucp_failover_ep(ep);
    ucp_lane_index_t lane;

    if (!ucp_failover_is_enabled(ep->worker->context)) {
        return; /* (the shared inactive state) */
    }

    fo->peer_lane_valid = 0;
    for (lane = 0; lane < ucp_ep_num_lanes(ep); ++lane) {
        fo->peer_lane[lane] = lanes2remote[lane];
        if (lanes2remote[lane] != UCP_NULL_LANE) {
            fo->peer_lane_valid |= UCS_BIT(lane);
        }
    }
}

int ucp_failover_lane_is_failed(ucp_ep_h ep, ucp_lane_index_t lane)
{
    return !!(ucp_failover_ep(ep)->failed_lanes & UCS_BIT(lane));
}

const char *ucp_failover_lane_state_str(ucp_ep_h ep, ucp_lane_index_t lane)
{
    if (ucp_failover_lane_is_failed(ep, lane)) {
        return ucp_failover_recover_in_flight(ep, lane) ? "recovering" :
                                                          "failed";
    }

    return "up";
}

void ucp_failover_ep_lane_info_str(ucp_ep_h ep, ucp_lane_index_t lane,
                                   ucs_string_buffer_t *strb)
{
    if (ucp_failover_is_enabled(ep->worker->context)) {
        ucs_string_buffer_appendf(strb, " state:%s",
                                  ucp_failover_lane_state_str(ep, lane));
        ucp_failover_recover_lane_info(ep, lane, strb);
    }
}

void ucp_failover_ep_print(ucp_ep_h ep, FILE *stream)
{
    ucp_failover_ep_t *fo = ucp_failover_ep(ep);
    UCS_STRING_BUFFER_ONSTACK(strb, 1024);

    if (!ucp_failover_is_enabled(ep->worker->context)) {
        return;
    }

    fprintf(stream, "#                 multi-rail failover: %s, %u lane "
            "failover(s), %u lane recovery(ies), failed lanes 0x%x, %u "
            "request(s) re-driven (%" PRIu64 " rendezvous bytes)%s\n",
            (fo->flags & UCP_FAILOVER_EP_FLAG_NEGOTIATED) ?
            "negotiated" : "not negotiated (peer without failover)",
            fo->num_failovers, fo->num_recoveries, fo->failed_lanes,
            fo->num_redriven, fo->redriven_bytes,
            (fo->flags & UCP_FAILOVER_EP_FLAG_CM_LOST) ?
            ", CM connection lost" : "");
    if (fo->flags & UCP_FAILOVER_EP_FLAG_NEGOTIATED) {
        ucp_failover_seq_info(ep, &strb);
        fprintf(stream, "#                 ordered messages: %s\n",
                ucs_string_buffer_cstr(&strb));
    }
}

/*
 * In a lane list (UCP_NULL_LANE terminated), replace every failed lane by the
 * first surviving lane of the same list. Positions do not move: requests in
 * flight keep indices into these lists (rendezvous lane maps, am_bw_index).
 * A list with no survivor is emptied. Returns whether the list changed.
 */
static int ucp_failover_replace_lanes(ucp_lane_index_t *lanes,
                                      ucp_lane_map_t failed,
                                      ucs_string_buffer_t *strb,
                                      const char *role)
{
    ucp_lane_index_t survivor = UCP_NULL_LANE;
    int changed               = 0;
    int i;

    for (i = 0; (i < UCP_MAX_LANES) && (lanes[i] != UCP_NULL_LANE); ++i) {
        if (!(failed & UCS_BIT(lanes[i]))) {
            survivor = lanes[i];
            break;
        }
    }

    for (i = 0; (i < UCP_MAX_LANES) && (lanes[i] != UCP_NULL_LANE); ++i) {
        if (!(failed & UCS_BIT(lanes[i]))) {
            continue;
        }

        ucs_string_buffer_appendf(strb, " %s#%d:%d->", role, i, lanes[i]);
        if (survivor != UCP_NULL_LANE) {
            ucs_string_buffer_appendf(strb, "%d", survivor);
        } else {
            ucs_string_buffer_appendf(strb, "none");
        }
        lanes[i] = survivor;
        changed  = 1;
    }

    if (survivor == UCP_NULL_LANE) {
        /* nothing left: make sure the list reads as empty */
        for (i = 0; i < UCP_MAX_LANES; ++i) {
            lanes[i] = UCP_NULL_LANE;
        }
    }

    return changed;
}

static void ucp_failover_replace_lane(ucp_lane_index_t *lane_p,
                                      ucp_lane_map_t failed,
                                      ucs_string_buffer_t *strb,
                                      const char *role)
{
    if ((*lane_p != UCP_NULL_LANE) && (failed & UCS_BIT(*lane_p))) {
        ucs_string_buffer_appendf(strb, " %s:%d->none", role, *lane_p);
        *lane_p = UCP_NULL_LANE;
    }
}

/* Take the failed lanes' roles out of an endpoint configuration key */
void ucp_failover_key_remove_lanes(ucp_worker_h worker,
                                   ucp_ep_config_key_t *key,
                                   ucp_lane_map_t failed,
                                   ucs_string_buffer_t *strb)
{
    int had_rma = (key->rma_lanes[0] != UCP_NULL_LANE);
    int i, num_am_bw;

    ucs_assert(!(failed & UCS_BIT(key->am_lane)));
    for (num_am_bw = 0; (num_am_bw < UCP_MAX_LANES) &&
                        (key->am_bw_lanes[num_am_bw] != UCP_NULL_LANE);
         ++num_am_bw) {
    }

    ucp_failover_replace_lanes(key->am_bw_lanes, failed, strb, "am_bw");
    if ((key->am_bw_lanes[0] == UCP_NULL_LANE) &&
        (key->am_lane != UCP_NULL_LANE)) {
        /* striped slots whose lanes all failed (the am lane moved off
         * them): they hold the am lane, in their positions */
        for (i = 0; i < num_am_bw; ++i) {
            key->am_bw_lanes[i] = key->am_lane;
        }
    }
    ucp_failover_replace_lanes(key->rma_bw_lanes, failed, strb, "rma_bw");
    ucp_failover_replace_lanes(key->rma_lanes, failed, strb, "rma");
    if (had_rma && (key->rma_lanes[0] == UCP_NULL_LANE)) {
        ucp_failover_key_rma_survivor(worker, key, failed, strb);
    }
    ucp_failover_replace_lanes(key->amo_lanes, failed, strb, "amo");
    ucp_failover_replace_lane(&key->wireup_msg_lane, failed, strb, "wireup");
    ucp_failover_replace_lane(&key->keepalive_lane, failed, strb, "keepalive");
    ucp_failover_replace_lane(&key->tag_lane, failed, strb, "tag");
    ucp_failover_replace_lane(&key->rkey_ptr_lane, failed, strb, "rkey_ptr");
}

/*
 * The order in which both peers consider lanes for the am lane: one side's
 * lane numbering. The side that processed the peer's wireup request kept
 * the peer's index of each lane and orders by it; the other orders by its
 * own. (Lanes connected to the peer's interface have no such map on either
 * side, and the same index on both.)
 */
static unsigned ucp_failover_am_order(ucp_ep_h ep, ucp_lane_index_t lane)
{
    ucp_failover_ep_t *fo = ucp_failover_ep(ep);

    return (fo->peer_lane_valid & UCS_BIT(lane)) ? fo->peer_lane[lane] : lane;
}

/*
 * A lane that can carry the ordered messages in place of the am lane: of
 * the lanes that are connected, not failed (nor in @a failing), not the CM
 * lane, and whose transport sends active messages (short and bcopy, with
 * limits no smaller than the am lane's), the first in the order both peers
 * use. So two peers that saw the same lanes fail and come back move their
 * am lanes to the same pair, whichever noticed first. (They can differ when
 * a lane comes back on one side while the am lane fails; correctness does
 * not depend on it: sequenced messages are accepted on any lane.)
 */
ucp_lane_index_t ucp_failover_am_survivor(ucp_ep_h ep, ucp_lane_map_t failing)
{
    ucp_failover_ep_t *fo = ucp_failover_ep(ep);
    ucp_lane_index_t best = UCP_NULL_LANE;
    const uct_iface_attr_t *attr, *am_attr;
    ucp_rsc_index_t rsc_index;
    ucp_lane_index_t lane;
    uct_ep_h uct_ep;

    /* the messages retained under the am lane's limits are sent again on
     * the new one, and acknowledgements go as short messages */
    am_attr = ucp_worker_iface_get_attr(ep->worker,
                                        ucp_ep_get_rsc_index(
                                                ep, ucp_ep_get_am_lane(ep)));
    for (lane = 0; lane < ucp_ep_num_lanes(ep); ++lane) {
        if (((fo->failed_lanes | failing) & UCS_BIT(lane)) ||
            (lane == ucp_ep_get_cm_lane(ep)) ||
            (lane == ucp_ep_get_am_lane(ep))) {
            continue;
        }

        uct_ep = ep->uct_eps[lane];
        if ((uct_ep == NULL) || (uct_ep == &ucp_failed_tl_ep) ||
            ucp_wireup_ep_test(uct_ep)) {
            continue;
        }

        rsc_index = ucp_ep_get_rsc_index(ep, lane);
        if (rsc_index == UCP_NULL_RESOURCE) {
            continue;
        }

        attr = ucp_worker_iface_get_attr(ep->worker, rsc_index);
        if ((attr->cap.flags & UCT_IFACE_FLAG_AM_BCOPY) &&
            (attr->cap.flags & UCT_IFACE_FLAG_AM_SHORT) &&
            (attr->cap.flags & UCT_IFACE_FLAG_CB_SYNC) &&
            (attr->cap.am.max_bcopy >= am_attr->cap.am.max_bcopy) &&
            (!(am_attr->cap.flags & UCT_IFACE_FLAG_AM_ZCOPY) ||
             ((attr->cap.flags & UCT_IFACE_FLAG_AM_ZCOPY) &&
              (attr->cap.am.max_zcopy >= am_attr->cap.am.max_zcopy))) &&
            ((best == UCP_NULL_LANE) ||
             (ucp_failover_am_order(ep, lane) <
              ucp_failover_am_order(ep, best)))) {
            best = lane;
        }
    }

    return best;
}

static void
ucp_failover_discarded_cb(void *request, ucs_status_t status, void *user_data)
{
}

/*
 * Whether @a lane is the only lane left in the endpoint's rendezvous (rma_bw)
 * lanes: a rendezvous in flight takes its lanes from that list, and
 * without one it would have none (failed lanes are replaced in the list by
 * surviving ones, so only surviving lanes are in it).
 */
static int ucp_failover_is_last_rma_bw_lane(ucp_ep_h ep, ucp_lane_index_t lane)
{
    const ucp_lane_index_t *lanes = ucp_ep_config(ep)->key.rma_bw_lanes;
    int found                     = 0;
    int i;

    for (i = 0; (i < UCP_MAX_LANES) && (lanes[i] != UCP_NULL_LANE); ++i) {
        if (lanes[i] != lane) {
            return 0;
        }
        found = 1;
    }
    return found;
}

/*
 * Whether wireup's request and reply can go to the am lane, as they do when
 * the lane that carries them (wireup_msg_lane) fails over. Not before the
 * peer is connected while the am lane's transport endpoint connects to the
 * peer's endpoint (RC with wireup over UD; TCP in err mode PEER): until the
 * reply has connected it, it cannot send, and its wireup endpoint has no
 * auxiliary endpoint (wireup has a lane of its own). An am lane connected
 * to the peer's interface can (TCP in err mode NONE: it sends once its
 * connection is made). An endpoint with a CM does not send them.
 */
static int ucp_failover_am_lane_takes_wireup(ucp_ep_h ep)
{
    ucp_lane_index_t am_lane = ucp_ep_get_am_lane(ep);
    ucp_wireup_ep_t *wireup_ep;

    if (ucp_ep_has_cm_lane(ep) || (ep->flags & UCP_EP_FLAG_REMOTE_CONNECTED)) {
        return 1;
    }

    if ((am_lane == UCP_NULL_LANE) || (ep->uct_eps[am_lane] == NULL)) {
        return 0;
    }

    if (!ucp_wireup_ep_test(ep->uct_eps[am_lane])) {
        return 1;
    }

    wireup_ep = ucp_wireup_ep(ep->uct_eps[am_lane]);
    return (wireup_ep->flags & UCP_WIREUP_EP_FLAG_READY) ||
           (wireup_ep->aux_ep != NULL) ||
           !ucp_ep_is_lane_p2p(ep, am_lane);
}

int ucp_failover_lane_can_fail(ucp_ep_h ep, ucp_lane_index_t lane)
{
    ucp_failover_ep_t *fo = ucp_failover_ep(ep);

    return (fo->flags & UCP_FAILOVER_EP_FLAG_NEGOTIATED) &&
           !(ep->flags & UCP_EP_FLAG_FAILED) &&
           (ep->cfg_index != UCP_WORKER_CFG_INDEX_NULL) &&
           (lane < ucp_ep_num_lanes(ep)) &&
           /* the am lane carries the ordered messages: it can fail over when
            * they are sequenced, to a lane that can carry them */
           ((lane != ucp_ep_get_am_lane(ep)) ||
            (ucp_failover_seq_active(ep) &&
             (ucp_failover_am_survivor(ep, UCS_BIT(lane)) != UCP_NULL_LANE))) &&
           (lane != ucp_ep_get_cm_lane(ep)) &&
           !(fo->failed_lanes & UCS_BIT(lane)) &&
           /* the endpoint keeps a lane for its rendezvous data */
           !ucp_failover_is_last_rma_bw_lane(ep, lane) &&
           /* the am lane still being connected is wireup's business: it
            * carries wireup's own messages; a data lane can fail over
            * (e.g. a rail that is down on one peer when they connect) */
           (!ucp_wireup_ep_test(ep->uct_eps[lane]) ||
            (lane != ucp_ep_get_am_lane(ep))) &&
           /* so is the lane of wireup's request and reply while only it
            * can carry them */
           ((lane != ucp_ep_config(ep)->key.wireup_msg_lane) ||
            ucp_failover_am_lane_takes_wireup(ep));
}

ucs_status_t ucp_failover_lane_down(ucp_ep_h ep, ucp_lane_index_t lane,
                                    const char *reason, ucs_status_t status,
                                    int notify_peer)
{
    ucp_failover_ep_t *fo = ucp_failover_ep(ep);
    ucp_worker_h worker   = ep->worker;
    UCS_STRING_BUFFER_ONSTACK(moved, 256);
    UCS_STRING_BUFFER_ONSTACK(desc, 128);
    ucp_worker_cfg_index_t cfg_index;
    ucs_queue_head_t replay_q;
    ucp_ep_config_key_t key;
    ucp_lane_index_t am_lane;
    ucp_rsc_index_t rsc_index;
    ucs_status_t cfg_status;
    uct_ep_h uct_ep;
    size_t num_replayed;

    UCP_WORKER_THREAD_CS_CHECK_IS_BLOCKED(worker);
    ucs_assert(ucp_failover_lane_can_fail(ep, lane));

    ucs_string_buffer_appendf(&desc, "lane[%d] ", lane);
    ucp_ep_get_lane_info_str(ep, lane, &desc);
    key     = ucp_ep_config(ep)->key;
    am_lane = key.am_lane;
    if (lane == am_lane) {
        /* the ordered messages move to a surviving lane */
        ucp_failover_key_set_am_lane(&key,
                                     ucp_failover_am_survivor(ep,
                                                              UCS_BIT(lane)),
                                     &moved);
    }
    ucp_failover_key_remove_lanes(worker, &key,
                                  fo->failed_lanes | UCS_BIT(lane), &moved);
    cfg_status = ucp_worker_get_ep_config(worker, &key, 0, &cfg_index);
    if (cfg_status != UCS_OK) {
        /* the endpoint fails as it would without failover, rather than go
         * on using a dead lane; from progress, for every caller (some walk
         * the worker's endpoints) */
        ucs_error("ep %p: cannot fail over %s (%s), no endpoint configuration "
                  "without it: %s; the endpoint fails", ep,
                  ucs_string_buffer_cstr(&desc), reason,
                  ucs_status_string(cfg_status));
        ucp_ep_set_failed_schedule(ep, lane,
                                   (status != UCS_OK) ? status :
                                                        UCS_ERR_ENDPOINT_TIMEOUT);
        return cfg_status;
    }

    ucp_failover_recover_lane_down(ep, lane, reason, status);
    fo->failed_lanes |= UCS_BIT(lane);
    fo->num_restarts  = 0;
    ++fo->num_failovers;
    ucp_failover_round_want(fo); /* its recovery runs in the probe rounds */

    /* From now on nothing reaches the lane's transport endpoint */
    rsc_index     = ucp_ep_get_rsc_index(ep, lane);
    ep->cfg_index = cfg_index;
    /* this endpoint's lines below: info if it is the first of the rail's
     * event in the worker, else debug (ucp_failover_log.c) */
    ucp_failover_log_lane_event(ep->worker, rsc_index, 0);
    ep->am_lane   = key.am_lane; /* cached by the endpoint */
    ucs_queue_head_init(&replay_q);
    if (lane == am_lane) {
        /* the sequencing endpoint moves to the new am lane, with the
         * messages the peer did not acknowledge */
        uct_ep = ucp_failover_seq_am_lane_moved(ep, lane, &replay_q);
    } else {
        uct_ep = ep->uct_eps[lane];
    }
    ep->uct_eps[lane] = &ucp_failed_tl_ep;

    /* Requests pending on the lane are taken out, and sent again under the
     * new configuration, which puts them on surviving lanes, after the
     * ordered messages sent again. The failed transport endpoint is
     * flushed (cancelled) and destroyed in the background; a worker flush
     * does not wait for that: its work is on the other lanes now, and on a
     * stuck path (a NIC holding its packets) the cancel may never end */
    ucp_worker_discard_uct_ep(ep, uct_ep, rsc_index,
                              UCT_FLUSH_FLAG_CANCEL |
                              UCP_WORKER_DISCARD_FLAG_NO_FLUSH_OP,
                              ucp_request_purge_enqueue_cb, &replay_q,
                              ucp_failover_discarded_cb, NULL);
    num_replayed = ucs_queue_length(&replay_q);
    ucp_failover_log_moved(ep->worker, rsc_index, num_replayed);

    /* a lane that takes over an am_bw slot carries a data stream */
    ucp_failover_seq_ep_connected(ep);
    ucp_failover_seq_resend(ep);
    ucp_failover_replay(ep, &replay_q);

    ucs_log(ucp_failover_log_level(ep->worker),
            "ep %p: %s failed (%s%s%s), endpoint continues on the other "
            "lanes:%s; %zu pending request(s) moved", ep,
            ucs_string_buffer_cstr(&desc), reason,
            (status != UCS_OK) ? ": " : "",
            (status != UCS_OK) ? ucs_status_string(status) : "",
            ucs_string_buffer_cstr(&moved), num_replayed);
    ucp_failover_log_level_reset(ep->worker);

    if (notify_peer) {
        ucp_failover_wire_lane_down(ep, lane);
    }

    if (lane == am_lane) {
        ucp_failover_wire_lane_down_again(ep,
                                          fo->failed_lanes & ~UCS_BIT(lane));
    }

    /* Other endpoints to the peer over the same rail share its path */
    ucp_failover_probe_rail(ep, rsc_index);
    return UCS_OK;
}

void ucp_failover_replay(ucp_ep_h ep, ucs_queue_head_t *replay_q)
{
    uct_pending_req_t *uct_req;
    ucs_queue_head_t queue;
    ucp_request_t *req;

    /* they are no longer pending anywhere, and those that cached a lane
     * (RMA, AMO) take one of the current configuration */
    ucs_queue_head_init(&queue);
    ucs_queue_for_each_extract(uct_req, replay_q, priv, 1) {
        req = ucs_container_of(uct_req, ucp_request_t, send.uct);
        if (ucp_failover_reroute(req)) {
            ucs_queue_push(&queue, (ucs_queue_elem_t*)uct_req->priv);
        }
    }

    ucp_wireup_replay_pending_requests(ep, &queue);
}

ucs_status_t ucp_failover_lane_error(ucp_ep_h ep, ucp_lane_index_t lane,
                                     ucs_status_t status)
{
    ucp_failover_worker_t *fw = ep->worker->failover;

    if (ucp_failover_seq_defer_error(ep, lane, status)) {
        return UCS_OK;
    }

    if (ucp_failover_lane_can_fail(ep, lane)) {
        /* (with no configuration left, the endpoint's failure is scheduled) */
        ucp_failover_lane_down(ep, lane, "transport error", status, 1);
        return UCS_OK;
    }

    /* the endpoint cannot live without the lane: it fails as without
     * failover */
    if ((fw != NULL) && fw->walking) {
        /* the error came from a probe inside the rail monitor's walk of
         * the endpoints: failing the endpoint there could destroy
         * endpoints under the walk, so do it from progress */
        ucp_ep_set_failed_schedule(ep, lane, status);
        return UCS_OK;
    }

    return status;
}
