/**
 * Copyright (C) Multi-rail failover for UCX authors. 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 *
 * mr_check: an end-to-end correctness checker for UCP over several rails.
 *
 * A client streams messages of the tag, AM and stream APIs to a server, and
 * runs RMA put/get and atomics on the server's memory. Every message carries a
 * per-API sequence number and a payload derived from it (with a checksum), so
 * the receiver reports lost, duplicated, reordered and corrupted messages.
 * Every wait is bounded: a stall is reported as a hang. Only the public UCP
 * API is used, so the program runs on any UCX 1.13 library.
 *
 * Output (stdout, one record per line, "KIND key=value ..."):
 *   START  role=... conn=... err_mode=... apis=... sizes=...
 *   TL     t=... wall=... msgs=... bytes=... <rail>_tx=... <rail>_rx=...
 *   EVENT  t=... wall=... kind=error_cb|op_error|hang|... status="..."
 *   SLOW   api=... size=... phase=... post=WALL done=WALL (--slow-log)
 *   RESULT role=... status=ok|violation|error|hang ...
 * Exit code: 0 ok, 1 violation, 2 error callback or failed operation,
 *            3 hang, 4 usage or setup failure.
 */

#define _GNU_SOURCE
#include <ucp/api/ucp.h>

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>


#define MRC_TAG_MAGIC      0xa5ull
#define MRC_TAG_KIND_DATA  1ull
#define MRC_TAG_KIND_CTRL  2ull
#define MRC_TAG_SEQ_MASK   ((1ull << 48) - 1)
#define MRC_TAG_HDR_MASK   (~MRC_TAG_SEQ_MASK)
#define MRC_AM_ID          17
#define MRC_MAX_SIZES      32
#define MRC_MAX_RAILS      8
#define MRC_MAX_TAG_RECVS  64
#define MRC_AMO_OFFSET     0      /* the atomic counter, then the RMA area */
#define MRC_RMA_OFFSET     64
#define MRC_RKEY_MAX       4096
#define MRC_STREAM_PREFIX  16


enum {
    API_TAG,
    API_AM,
    API_STREAM,
    API_RMA,
    API_AMO,
    API_LAST
};

static const char *api_names[] = {"tag", "am", "stream", "rma", "amo"};

enum {
    CTRL_SETUP  = 1, /* server -> client: RMA address and rkey */
    CTRL_FIN    = 2, /* client -> server: how many messages were sent */
    CTRL_REPORT = 3, /* server -> client: the server's verdict */
    CTRL_HELLO  = 4  /* client -> server: sizes and APIs of the traffic */
};

typedef struct {
    uint64_t type;
    uint64_t sent[API_LAST];
    uint64_t violations;
    uint64_t rma_addr;
    uint64_t rkey_len;
    uint8_t  rkey[MRC_RKEY_MAX];
    uint64_t num_sizes;
    uint64_t sizes[MRC_MAX_SIZES];
    uint64_t apis[API_LAST];
} ctrl_msg_t;

typedef struct {
    uint64_t seq;
    uint64_t size;
} am_hdr_t;

/* What the receiver (or, for RMA/AMO, the initiator) saw for one API */
typedef struct {
    uint8_t  *seen;      /* seen[seq] = number of times delivered */
    uint64_t seen_cap;
    uint64_t max_seen;   /* 1 + highest seq delivered */
    uint64_t received;
    uint64_t bytes;
    uint64_t dup;
    uint64_t reorder;
    uint64_t late;       /* AM: a multi-fragment message that completed
                            after later ones (not a violation, see
                            --am-order) */
    uint64_t corrupt;
    uint64_t lost;
    uint64_t next;       /* next seq expected in order */
} api_stats_t;

typedef struct op op_t;
struct op {
    int          api;
    int          active;
    int          done;
    ucs_status_t status;
    uint64_t     seq;
    size_t       size;
    size_t       length;   /* received length */
    ucp_tag_t    tag;      /* received tag */
    void         *req;
    uint8_t      *buf;
    size_t       buf_size;
    int          phase;    /* RMA: 0 put, 1 flush, 2 get */
    uint64_t     post_idx; /* tag receive: order of posting */
    uint64_t     result;   /* AMO fetched value */
    am_hdr_t     hdr;      /* AM header, valid until the send completes */
    double       t_post;   /* wall clock: posted (RMA: this phase) */
    double       t_done;   /* wall clock: completion callback */
};

static struct {
    /* options */
    int          server;
    const char   *peer;
    const char   *listen_ip;
    int          port;
    int          conn_sockaddr;
    int          err_mode_peer;
    int          api_enabled[API_LAST];
    size_t       sizes[MRC_MAX_SIZES];
    int          num_sizes;
    double       duration;
    uint64_t     count;
    int          window;
    double       interval;
    double       hang_timeout;
    double       connect_timeout;
    double       settle;
    double       linger;      /* after the exchange, wait that long for the
                                 peer to close first */
    int          peer_closed; /* the peer's close was reported after the
                                 exchange */
    const char   *rails[MRC_MAX_RAILS];
    int          num_rails;
    int          tag_recvs;
    int          inject;      /* self-test: break the tag stream on purpose */
    int          extra_eps;   /* idle endpoints to the peer (address mode) */
    double       sleep;       /* sleep on the event fd before the traffic */
    double       stall;       /* server: no call into UCP for that long ... */
    double       stall_at;    /* ... that long into the traffic */
    double       slow_log;    /* client: log ops slower than this (sec) */
    int          am_striped;  /* AM fragments stripe over lanes: a
                                 multi-fragment message may complete late */
    size_t       am_single_max; /* longest AM payload sent in one fragment */
    int          print_info;  /* --info: the endpoint's information before
                                 it is closed */
    uint64_t     inject_seq;

    /* state */
    ucp_context_h context;
    ucp_worker_h  worker;
    ucp_listener_h listener;
    ucp_ep_h      ep;
    ucp_ep_h      *extra_ep;    /* extra_eps idle endpoints */
    ucp_mem_h     memh;
    uint8_t       *region;
    size_t        region_size;
    ucp_rkey_h    rkey;
    uint64_t      remote_addr;
    double        t0;
    double        last_progress;
    int           err_cb;
    ucs_status_t  err_status;
    int           done;         /* errors after this are not counted */
    const op_t    *final_op;    /* once this completes, the exchange is
                                   over: the peer's close may follow */
    uint64_t      op_errors;
    int           hang;
    size_t        max_size;
    api_stats_t   stats[API_LAST];
    uint64_t      sent[API_LAST];
    uint64_t      peer_sent[API_LAST];
    int           fin_received;
    int           fin_sent;
    int           report_received;
    uint64_t      peer_violations;
    /* timeline */
    double        tl_next;
    uint64_t      tl_msgs;
    uint64_t      tl_bytes;
    uint64_t      rail_last[MRC_MAX_RAILS][2];
} g = {
    .port            = 13337,
    .conn_sockaddr   = 1,
    .err_mode_peer   = 1,
    .duration        = 5,
    .count           = 0,
    .window          = 8,
    .interval        = 0.5,
    .hang_timeout    = 20,
    .am_striped      = -1,
    .am_single_max   = 4096,
    .connect_timeout = 20,
    .settle          = 3,
    .tag_recvs       = 16,
};


static double now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double wall(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void event(const char *kind, const char *fmt, ...)
{
    va_list ap;

    printf("EVENT t=%.3f wall=%.3f kind=%s", now() - g.t0, wall(), kind);
    if (fmt != NULL) {
        printf(" ");
        va_start(ap, fmt);
        vprintf(fmt, ap);
        va_end(ap);
    }
    printf("\n");
    if ((strcmp(kind, "hang") == 0) && (g.ep != NULL)) {
        /* the endpoint's lanes and sequencing state, for the diagnosis */
        ucp_ep_print_info(g.ep, stdout);
    }
    fflush(stdout);
}

static void die(const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "mr_check: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    printf("RESULT role=%s status=setup_error\n",
           g.server ? "server" : "client");
    exit(4);
}

/* ---------------------------------------------------------------------------
 * Payload: derived from (api, seq, size); first 16 bytes carry the sequence
 * number and a checksum of the rest; an 8-byte payload carries the sequence
 * number and a 32-bit hash of it.
 * ------------------------------------------------------------------------ */

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

static uint64_t checksum(const uint8_t *p, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull, w;
    size_t i;

    for (i = 0; i + 8 <= len; i += 8) {
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 29;
    }
    for (; i < len; ++i) {
        h = (h ^ p[i]) * 0x100000001b3ull;
    }
    return h;
}

static void fill_payload(uint8_t *buf, size_t size, int api, uint64_t seq)
{
    uint64_t state = mix64(((uint64_t)api << 56) ^ seq ^ size), w, hdr[2];
    size_t i;

    if (size < 16) {
        w = (seq << 32) | (mix64(seq ^ ((uint64_t)api << 56)) & 0xffffffffull);
        memcpy(buf, &w, size < 8 ? size : 8);
        return;
    }

    for (i = 16; i + 8 <= size; i += 8) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        memcpy(buf + i, &state, 8);
    }
    for (; i < size; ++i) {
        buf[i] = (uint8_t)(state >> (8 * (i % 8)));
    }

    hdr[0] = seq;
    hdr[1] = checksum(buf + 16, size - 16);
    memcpy(buf, hdr, sizeof(hdr));
}

/* Return 0 if the payload is intact and carries sequence number seq */
static int check_payload(const uint8_t *buf, size_t len, int api, uint64_t seq,
                         uint8_t *scratch)
{
    uint64_t hdr[2], w;

    if (len < 16) {
        if (len < 8) {
            return -1;
        }
        memcpy(&w, buf, 8);
        return ((w >> 32) != (seq & 0xffffffffull)) ||
               ((w & 0xffffffffull) !=
                (mix64(seq ^ ((uint64_t)api << 56)) & 0xffffffffull));
    }

    memcpy(hdr, buf, sizeof(hdr));
    if ((hdr[0] != seq) || (hdr[1] != checksum(buf + 16, len - 16))) {
        return -1;
    }

    /* the checksum could match a payload of the wrong message: compare */
    fill_payload(scratch, len, api, seq);
    return memcmp(scratch, buf, len) != 0;
}

/*
 * For a corrupted payload: which bytes are wrong, and whether they are those
 * of another message of the same size (a late write meant for it, as a stale
 * transfer into reused memory would make)
 */
static void report_damage(int api, uint64_t seq, const uint8_t *buf,
                          size_t len, uint8_t *scratch)
{
    size_t i, first = SIZE_MAX, last = 0, bad = 0, runs = 0;
    int64_t d, match = 0;

    if (len < 16) {
        return;
    }

    fill_payload(scratch, len, api, seq);
    for (i = 0; i < len; ++i) {
        if (buf[i] != scratch[i]) {
            if ((bad == 0) || (i != last + 1)) {
                ++runs;
            }
            first = (bad == 0) ? i : first;
            last  = i;
            ++bad;
        }
    }
    if (bad == 0) {
        return;
    }

    /* the bytes of a message up to 64 before or after it, at their place */
    for (d = -64; (d <= 64) && (match == 0); ++d) {
        if ((d == 0) || ((int64_t)seq + d < 0)) {
            continue;
        }
        fill_payload(scratch, len, api, seq + d);
        if ((first >= 16) &&
            (memcmp(scratch + first, buf + first, last + 1 - first) == 0)) {
            match = d;
        }
    }

    event("damage", "api=%s seq=%" PRIu64 " len=%zu bad_bytes=%zu runs=%zu "
          "first=%zu last=%zu other_message=%s%" PRId64, api_names[api], seq,
          len, bad, runs, first, last, (match > 0) ? "+" : "", match);
}

static size_t size_of(int api, uint64_t seq)
{
    (void)api;
    return g.sizes[seq % g.num_sizes];
}

/* ---------------------------------------------------------------------------
 * Order and exactly-once accounting
 * ------------------------------------------------------------------------ */

static void stats_deliver(int api, uint64_t seq, size_t len, int intact,
                          int may_be_late)
{
    api_stats_t *st = &g.stats[api];
    uint64_t cap;

    if (seq >= st->seen_cap) {
        cap = st->seen_cap ? st->seen_cap : 4096;
        while (cap <= seq) {
            cap *= 2;
        }
        st->seen = realloc(st->seen, cap);
        if (st->seen == NULL) {
            die("out of memory");
        }
        memset(st->seen + st->seen_cap, 0, cap - st->seen_cap);
        st->seen_cap = cap;
    }

    g.last_progress = now();
    ++g.tl_msgs;
    g.tl_bytes += len;
    ++st->received;
    st->bytes += len;

    if (!intact) {
        ++st->corrupt;
        event("corrupt", "api=%s seq=%" PRIu64 " len=%zu", api_names[api],
              seq, len);
    }

    if (st->seen[seq]) {
        ++st->dup;
        event("duplicate", "api=%s seq=%" PRIu64, api_names[api], seq);
    } else if ((seq < st->next) && may_be_late) {
        ++st->late;
        event("late", "api=%s seq=%" PRIu64 " expected=%" PRIu64 " len=%zu",
              api_names[api], seq, st->next, len);
    } else if (seq < st->next) {
        ++st->reorder;
        event("reorder", "api=%s seq=%" PRIu64 " expected=%" PRIu64,
              api_names[api], seq, st->next);
    }

    if (st->seen[seq] < 255) {
        ++st->seen[seq];
    }
    if (seq >= st->next) {
        st->next = seq + 1;
    }
    if (seq + 1 > st->max_seen) {
        st->max_seen = seq + 1;
    }
}

/* Count messages [0, total) never delivered */
static void stats_finish(int api, uint64_t total)
{
    api_stats_t *st = &g.stats[api];
    uint64_t seq;

    st->lost = 0;
    for (seq = 0; seq < total; ++seq) {
        if ((seq >= st->seen_cap) || !st->seen[seq]) {
            ++st->lost;
        }
    }
    /* seq numbers beyond what the sender says it sent are also wrong */
    if (st->max_seen > total) {
        st->corrupt += st->max_seen - total;
    }
}

static uint64_t violations(void)
{
    uint64_t v = 0;
    int api;

    for (api = 0; api < API_LAST; ++api) {
        v += g.stats[api].lost + g.stats[api].dup + g.stats[api].reorder +
             g.stats[api].corrupt;
    }
    return v;
}

/* ---------------------------------------------------------------------------
 * Timeline
 * ------------------------------------------------------------------------ */

static int read_rail_counter(const char *rail, const char *name, uint64_t *val)
{
    char path[256];
    FILE *f;
    int ok;

    snprintf(path, sizeof(path), "/sys/class/net/%s/statistics/%s", rail,
             name);
    f = fopen(path, "r");
    if (f == NULL) {
        return -1;
    }
    ok = fscanf(f, "%" SCNu64, val) == 1;
    fclose(f);
    return ok ? 0 : -1;
}

static void timeline(int force)
{
    uint64_t tx, rx;
    double t = now();
    int i;

    if (!force && (t < g.tl_next)) {
        return;
    }

    g.tl_next = t + g.interval;
    printf("TL t=%.3f wall=%.3f msgs=%" PRIu64 " bytes=%" PRIu64, t - g.t0,
           wall(), g.tl_msgs, g.tl_bytes);
    for (i = 0; i < g.num_rails; ++i) {
        if ((read_rail_counter(g.rails[i], "tx_bytes", &tx) == 0) &&
            (read_rail_counter(g.rails[i], "rx_bytes", &rx) == 0)) {
            printf(" %s_tx=%" PRIu64 " %s_rx=%" PRIu64, g.rails[i],
                   tx - g.rail_last[i][0], g.rails[i], rx - g.rail_last[i][1]);
            g.rail_last[i][0] = tx;
            g.rail_last[i][1] = rx;
        } else {
            printf(" %s_tx=- %s_rx=-", g.rails[i], g.rails[i]);
        }
    }
    printf("\n");
    fflush(stdout);
    g.tl_msgs  = 0;
    g.tl_bytes = 0;
}

static void progress(void)
{
    ucp_worker_progress(g.worker);
    timeline(0);
}

/* ---------------------------------------------------------------------------
 * Requests
 * ------------------------------------------------------------------------ */

static void op_complete(op_t *op, ucs_status_t status)
{
    op->status = status;
    op->done   = 1;
    op->t_done = wall();
}

/* --slow-log: one SLOW record per client operation (RMA: per phase) that took
 * at least that long, for the benchmarks' fault-to-completion times */
static void op_slow_log(const op_t *op)
{
    if ((g.slow_log > 0) && (op->t_done - op->t_post >= g.slow_log)) {
        printf("SLOW api=%s size=%zu phase=%d post=%.6f done=%.6f\n",
               api_names[op->api], op->size, op->phase, op->t_post,
               op->t_done);
    }
}

static void send_cb(void *request, ucs_status_t status, void *user_data)
{
    op_complete(user_data, status);
}

static void tag_recv_cb(void *request, ucs_status_t status,
                        const ucp_tag_recv_info_t *info, void *user_data)
{
    op_t *op = user_data;

    if (status == UCS_OK) {
        op->tag    = info->sender_tag;
        op->length = info->length;
    }
    op_complete(op, status);
}

static void stream_recv_cb(void *request, ucs_status_t status, size_t length,
                           void *user_data)
{
    op_t *op = user_data;

    op->length = length;
    op_complete(op, status);
}

/* Returns 1 if the operation completed (op->status set), 0 if in progress */
static int op_track(op_t *op, ucs_status_ptr_t sp)
{
    if (UCS_PTR_IS_PTR(sp)) {
        op->req = sp;
        return 0;
    }
    op_complete(op, UCS_PTR_STATUS(sp));
    return 1;
}

static void op_release(op_t *op)
{
    if (op->req != NULL) {
        ucp_request_free(op->req);
        op->req = NULL;
    }
    op->active = 0;
    op->done   = 0;
}

static int check_status(op_t *op, const char *what)
{
    if (op->status == UCS_OK) {
        return 0;
    }
    if (!g.done) {
        ++g.op_errors;
        event("op_error", "api=%s op=%s seq=%" PRIu64 " phase=%d size=%zu "
              "status=\"%s\"", api_names[op->api], what, op->seq, op->phase,
              op->size, ucs_status_string(op->status));
    }
    return -1;
}

/* Wait for one request, bounded by the hang timeout */
static ucs_status_t wait_op(op_t *op, const char *what)
{
    double deadline = now() + g.hang_timeout;

    while (!op->done) {
        progress();
        if (op->done) {
            break; /* completed, whatever came after it */
        }
        if (g.err_cb && !g.done) {
            return g.err_status; /* the endpoint is gone */
        }
        if (now() > deadline) {
            if (!g.hang) {
                g.hang = 1;
                event("hang", "waiting_for=%s", what);
            }
            return UCS_ERR_TIMED_OUT;
        }
    }
    return op->status;
}

static void *xmalloc(size_t size)
{
    void *p = malloc(size);

    if (p == NULL) {
        die("out of memory (%zu bytes)", size);
    }
    return p;
}

/* ---------------------------------------------------------------------------
 * Setup
 * ------------------------------------------------------------------------ */

static void err_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    /* A peer that closes its endpoint after the exchange is reported as an
     * error by UCX (a close is how a client/server peer learns the other
     * left); it is one only if it comes before what the peer sent before
     * its close: here, before the last message of the exchange arrived */
    if (g.done || ((g.final_op != NULL) && g.final_op->done &&
                   (g.final_op->status == UCS_OK))) {
        g.peer_closed = 1;
        event("error_cb_after_done", "status=\"%s\"",
              ucs_status_string(status));
        return;
    }
    g.err_cb     = 1;
    g.err_status = status;
    event("error_cb", "status=\"%s\"", ucs_status_string(status));
}

/* An idle extra endpoint's error: the peer closes its extra endpoints once
 * the exchange is over (the server after the client's FIN, the client after
 * the server's REPORT), which UCX reports as an error; before that, it is
 * one */
static void extra_err_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    if (g.server ? g.fin_received : g.fin_sent) {
        event("extra_error_cb_after_fin", "status=\"%s\"",
              ucs_status_string(status));
        return;
    }
    err_cb(arg, ep, status);
}

static ucs_status_t am_cb(void *arg, const void *header, size_t header_length,
                          void *data, size_t length,
                          const ucp_am_recv_param_t *param);

static void init_ucp(void)
{
    ucp_params_t params = {0};
    ucp_worker_params_t wparams = {0};
    ucp_am_handler_param_t am = {0};
    ucs_status_t status;

    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features   = UCP_FEATURE_TAG | UCP_FEATURE_AM | UCP_FEATURE_STREAM |
                        UCP_FEATURE_RMA | UCP_FEATURE_AMO64 |
                        ((g.sleep > 0) ? UCP_FEATURE_WAKEUP : 0);
    status = ucp_init(&params, NULL, &g.context);
    if (status != UCS_OK) {
        die("ucp_init failed: %s", ucs_status_string(status));
    }

    wparams.field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
    status = ucp_worker_create(g.context, &wparams, &g.worker);
    if (status != UCS_OK) {
        die("ucp_worker_create failed: %s", ucs_status_string(status));
    }

    if (g.server) {
        am.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                        UCP_AM_HANDLER_PARAM_FIELD_CB |
                        UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
        am.id         = MRC_AM_ID;
        am.cb         = am_cb;
        am.flags      = UCP_AM_FLAG_WHOLE_MSG;
        status = ucp_worker_set_am_recv_handler(g.worker, &am);
        if (status != UCS_OK) {
            die("set_am_recv_handler failed: %s", ucs_status_string(status));
        }

    }
}

/* Server: the memory the client's RMA and atomics work on */
static void map_region(void)
{
    ucp_mem_map_params_t mparams = {0};
    ucp_mem_attr_t attr = {.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS};
    ucs_status_t status;

    g.region_size      = MRC_RMA_OFFSET + g.max_size;
    mparams.field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                         UCP_MEM_MAP_PARAM_FIELD_FLAGS;
    mparams.length     = g.region_size;
    mparams.flags      = UCP_MEM_MAP_ALLOCATE;
    status = ucp_mem_map(g.context, &mparams, &g.memh);
    if (status != UCS_OK) {
        die("ucp_mem_map failed: %s", ucs_status_string(status));
    }
    ucp_mem_query(g.memh, &attr);
    g.region = attr.address;
    memset(g.region, 0, g.region_size);
}

static void ep_params_common(ucp_ep_params_t *ep_params)
{
    if (g.err_mode_peer) {
        ep_params->field_mask     |= UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                                     UCP_EP_PARAM_FIELD_ERR_HANDLER;
        ep_params->err_mode        = UCP_ERR_HANDLING_MODE_PEER;
        ep_params->err_handler.cb  = err_cb;
        ep_params->err_handler.arg = NULL;
    } else {
        ep_params->field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
        ep_params->err_mode    = UCP_ERR_HANDLING_MODE_NONE;
    }
}

static void conn_cb(ucp_conn_request_h conn_request, void *arg)
{
    ucp_ep_params_t ep_params = {0};
    ucs_status_t status;

    if (g.ep != NULL) {
        ucp_listener_reject(g.listener, conn_request);
        return;
    }

    ep_params.field_mask   = UCP_EP_PARAM_FIELD_CONN_REQUEST;
    ep_params.conn_request = conn_request;
    ep_params_common(&ep_params);
    status = ucp_ep_create(g.worker, &ep_params, &g.ep);
    if (status != UCS_OK) {
        die("ucp_ep_create (server) failed: %s", ucs_status_string(status));
    }
}

static void fill_sockaddr(struct sockaddr_in *sa, const char *ip, int port)
{
    memset(sa, 0, sizeof(*sa));
    sa->sin_family = AF_INET;
    sa->sin_port   = htons(port);
    if ((ip == NULL) || !strcmp(ip, "*")) {
        sa->sin_addr.s_addr = INADDR_ANY;
    } else if (inet_pton(AF_INET, ip, &sa->sin_addr) != 1) {
        die("bad IPv4 address '%s'", ip);
    }
}

static void connect_sockaddr(void)
{
    ucp_listener_params_t lparams = {0};
    ucp_ep_params_t ep_params = {0};
    struct sockaddr_in sa;
    ucs_status_t status;
    double deadline;

    if (g.server) {
        fill_sockaddr(&sa, g.listen_ip, g.port);
        lparams.field_mask       = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR |
                                   UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
        lparams.sockaddr.addr    = (struct sockaddr*)&sa;
        lparams.sockaddr.addrlen = sizeof(sa);
        lparams.conn_handler.cb  = conn_cb;
        status = ucp_listener_create(g.worker, &lparams, &g.listener);
        if (status != UCS_OK) {
            die("ucp_listener_create failed: %s", ucs_status_string(status));
        }
        printf("LISTENING port=%d\n", g.port);
        fflush(stdout);
        deadline = now() + g.connect_timeout;
        while (g.ep == NULL) {
            ucp_worker_progress(g.worker);
            if (now() > deadline) {
                die("no client connected within %.0f s", g.connect_timeout);
            }
        }
    } else {
        fill_sockaddr(&sa, g.peer, g.port);
        ep_params.field_mask       = UCP_EP_PARAM_FIELD_FLAGS |
                                     UCP_EP_PARAM_FIELD_SOCK_ADDR;
        ep_params.flags            = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
        ep_params.sockaddr.addr    = (struct sockaddr*)&sa;
        ep_params.sockaddr.addrlen = sizeof(sa);
        ep_params_common(&ep_params);
        status = ucp_ep_create(g.worker, &ep_params, &g.ep);
        if (status != UCS_OK) {
            die("ucp_ep_create (client) failed: %s", ucs_status_string(status));
        }
    }
}

static void sock_xfer(int fd, void *buf, size_t len, int send_dir)
{
    size_t done = 0;
    ssize_t ret;

    while (done < len) {
        ret = send_dir ? send(fd, (char*)buf + done, len - done, MSG_NOSIGNAL) :
                         recv(fd, (char*)buf + done, len - done, 0);
        if (ret <= 0) {
            die("out-of-band socket %s failed: %s", send_dir ? "send" : "recv",
                ret == 0 ? "peer closed" : strerror(errno));
        }
        done += ret;
    }
}

/* Exchange worker addresses over a plain TCP socket, then create the ep */
/*
 * Idle endpoints to the same peer (both sides create as many, in the same
 * order, so that they pair up), each flushed once so that its wireup is
 * done: they carry no traffic, and show what the rail monitor costs and does
 * with many endpoints.
 */
static void create_extra_eps(const ucp_ep_params_t *main_params)
{
    ucp_ep_params_t params    = *main_params;
    ucp_ep_params_t *ep_params = &params;
    ucp_request_param_t param = {0};
    ucs_status_ptr_t sp;
    ucs_status_t status;
    double deadline;
    int i;

    if (g.extra_eps == 0) {
        printf("EXTRA_EPS 0\n");
        return;
    }

    if (params.field_mask & UCP_EP_PARAM_FIELD_ERR_HANDLER) {
        params.err_handler.cb = extra_err_cb;
    }
    g.extra_ep = xmalloc(sizeof(*g.extra_ep) * g.extra_eps);
    for (i = 0; i < g.extra_eps; ++i) {
        status = ucp_ep_create(g.worker, ep_params, &g.extra_ep[i]);
        if (status != UCS_OK) {
            die("ucp_ep_create (extra %d) failed: %s", i,
                ucs_status_string(status));
        }
    }

    deadline = now() + g.connect_timeout;
    for (i = 0; i < g.extra_eps; ++i) {
        sp = ucp_ep_flush_nbx(g.extra_ep[i], &param);
        if (!UCS_PTR_IS_PTR(sp)) {
            continue;
        }
        while ((ucp_request_check_status(sp) == UCS_INPROGRESS) &&
               (now() < deadline)) {
            ucp_worker_progress(g.worker);
        }
        if (ucp_request_check_status(sp) == UCS_INPROGRESS) {
            die("extra endpoint %d not connected within %.0f s", i,
                g.connect_timeout);
        }
        ucp_request_free(sp);
    }
    printf("EXTRA_EPS %d\n", g.extra_eps);
}

static void close_extra_eps(void)
{
    ucp_request_param_t param = {0};
    ucs_status_ptr_t sp;
    int i;

    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags        = UCP_EP_CLOSE_FLAG_FORCE;
    for (i = 0; i < g.extra_eps; ++i) {
        sp = ucp_ep_close_nbx(g.extra_ep[i], &param);
        if (UCS_PTR_IS_PTR(sp)) {
            while (ucp_request_check_status(sp) == UCS_INPROGRESS) {
                ucp_worker_progress(g.worker);
            }
            ucp_request_free(sp);
        }
    }
    free(g.extra_ep);
    g.extra_ep  = NULL;
    g.extra_eps = 0;
}

static void connect_address(void)
{
    ucp_ep_params_t ep_params = {0};
    struct sockaddr_in sa;
    struct timeval tv = {.tv_sec = (time_t)g.connect_timeout};
    ucp_address_t *addr;
    size_t addr_len;
    uint64_t len;
    void *peer_addr;
    int fd, lfd, one = 1;
    double deadline;
    ucs_status_t status;

    status = ucp_worker_get_address(g.worker, &addr, &addr_len);
    if (status != UCS_OK) {
        die("ucp_worker_get_address failed: %s", ucs_status_string(status));
    }

    if (g.server) {
        fill_sockaddr(&sa, g.listen_ip, g.port);
        lfd = socket(AF_INET, SOCK_STREAM, 0);
        setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        setsockopt(lfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        if ((bind(lfd, (struct sockaddr*)&sa, sizeof(sa)) != 0) ||
            (listen(lfd, 1) != 0)) {
            die("out-of-band listen on port %d failed: %s", g.port,
                strerror(errno));
        }
        printf("LISTENING port=%d\n", g.port);
        fflush(stdout);
        fd = accept(lfd, NULL, NULL);
        if (fd < 0) {
            die("no client connected within %.0f s", g.connect_timeout);
        }
        close(lfd);
    } else {
        fill_sockaddr(&sa, g.peer, g.port);
        deadline = now() + g.connect_timeout;
        for (;;) {
            fd = socket(AF_INET, SOCK_STREAM, 0);
            if (connect(fd, (struct sockaddr*)&sa, sizeof(sa)) == 0) {
                break;
            }
            close(fd);
            if (now() > deadline) {
                die("cannot connect to %s:%d: %s", g.peer, g.port,
                    strerror(errno));
            }
            usleep(50000);
        }
    }
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));

    len = addr_len;
    sock_xfer(fd, &len, sizeof(len), 1);
    sock_xfer(fd, addr, addr_len, 1);
    sock_xfer(fd, &len, sizeof(len), 0);
    if (len > (1 << 20)) {
        die("bad peer address length %" PRIu64, len);
    }
    peer_addr = xmalloc(len);
    sock_xfer(fd, peer_addr, len, 0);
    close(fd);
    ucp_worker_release_address(g.worker, addr);

    ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep_params.address    = peer_addr;
    ep_params_common(&ep_params);
    status = ucp_ep_create(g.worker, &ep_params, &g.ep);
    if (status != UCS_OK) {
        die("ucp_ep_create failed: %s", ucs_status_string(status));
    }

    create_extra_eps(&ep_params);
    free(peer_addr);
}

/* ---------------------------------------------------------------------------
 * Control messages (tag API, a tag space of their own)
 * ------------------------------------------------------------------------ */

static ucp_tag_t ctrl_tag(uint64_t type)
{
    return (MRC_TAG_MAGIC << 56) | (MRC_TAG_KIND_CTRL << 48) | type;
}

static ucs_status_t ctrl_send(ctrl_msg_t *msg)
{
    ucp_request_param_t param = {0};
    /* on the heap: a send that never completes may still call back later */
    op_t *op = calloc(1, sizeof(*op));
    ucs_status_t status;

    if (op == NULL) {
        die("out of memory");
    }
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                         UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.send      = send_cb;
    param.user_data    = op;
    op_track(op, ucp_tag_send_nbx(g.ep, msg, sizeof(*msg),
                                  ctrl_tag(msg->type), &param));
    wait_op(op, "ctrl_send");
    if (!op->done) {
        return UCS_ERR_TIMED_OUT; /* op and its request are left to UCP */
    }
    status = op->status;
    op_release(op);
    free(op);
    return status;
}

/* Post a control receive; the caller waits for op->done */
static void ctrl_recv_post(op_t *op, ctrl_msg_t *msg, uint64_t type)
{
    ucp_request_param_t param = {0};

    memset(op, 0, sizeof(*op));
    op->active         = 1;
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                         UCP_OP_ATTR_FIELD_USER_DATA |
                         UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    param.cb.recv      = tag_recv_cb;
    param.user_data    = op;
    op_track(op, ucp_tag_recv_nbx(g.worker, msg, sizeof(*msg), ctrl_tag(type),
                                  ~0ull, &param));
}

static void ctrl_recv_cancel(op_t *op)
{
    if ((op->req != NULL) && !op->done) {
        ucp_request_cancel(g.worker, op->req);
        while (!op->done) {
            ucp_worker_progress(g.worker);
        }
    }
    op_release(op);
}

/* ---------------------------------------------------------------------------
 * Server (receiver)
 * ------------------------------------------------------------------------ */

static uint8_t *g_scratch;
static volatile sig_atomic_t g_stop; /* SIGUSR1: end the traffic now */

static void on_sigusr1(int signo)
{
    g_stop = 1;
}

static unsigned g_am_rndv_outstanding;

typedef struct {
    op_t     op;
    am_hdr_t hdr;
} am_rndv_t;

static void am_data_cb(void *request, ucs_status_t status, size_t length,
                       void *user_data)
{
    am_rndv_t *r = user_data;
    int intact;

    if (status == UCS_OK) {
        intact = !check_payload(r->op.buf, length, API_AM, r->hdr.seq,
                                g_scratch) && (length == r->hdr.size);
        /* order was already checked when the header arrived */
        if (!intact) {
            ++g.stats[API_AM].corrupt;
            event("corrupt", "api=am seq=%" PRIu64 " len=%zu", r->hdr.seq,
                  length);
            report_damage(API_AM, r->hdr.seq, r->op.buf, length, g_scratch);
        }
        g.last_progress              = now();
        g.tl_bytes                  += length;
        g.stats[API_AM].bytes       += length;
    } else if (!g.done) {
        ++g.op_errors;
        event("op_error", "api=am op=recv_data seq=%" PRIu64 " status=\"%s\"",
              r->hdr.seq, ucs_status_string(status));
    }
    --g_am_rndv_outstanding;
    free(r->op.buf);
    ucp_request_free(request);
    free(r);
}

static ucs_status_t am_cb(void *arg, const void *header, size_t header_length,
                          void *data, size_t length,
                          const ucp_am_recv_param_t *param)
{
    ucp_request_param_t rparam = {0};
    am_hdr_t hdr;
    am_rndv_t *r;
    ucs_status_ptr_t sp;
    int intact;

    if (header_length != sizeof(hdr)) {
        ++g.stats[API_AM].corrupt;
        event("corrupt", "api=am header_length=%zu", header_length);
        return UCS_OK;
    }
    memcpy(&hdr, header, sizeof(hdr));

    if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
        intact = !check_payload(data, length, API_AM, hdr.seq, g_scratch) &&
                 (length == hdr.size);
        /* UCP calls this when the last fragment has landed: with fragments
         * striped over lanes (UCX_MAX_EAGER_RAILS > 1), a multi-fragment
         * message can complete after later ones, in stock UCX too (one
         * lane's TCP retransmission is enough) */
        stats_deliver(API_AM, hdr.seq, length, intact,
                      g.am_striped && (length > g.am_single_max));
        return UCS_OK;
    }

    /* order is decided by the arrival of the header; data is checked later */
    stats_deliver(API_AM, hdr.seq, 0, 1, 0);
    r          = xmalloc(sizeof(*r));
    r->hdr     = hdr;
    r->op.buf  = xmalloc(length ? length : 1);
    rparam.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                          UCP_OP_ATTR_FIELD_USER_DATA |
                          UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    rparam.cb.recv_am   = am_data_cb;
    rparam.user_data    = r;
    sp = ucp_am_recv_data_nbx(g.worker, data, r->op.buf, length, &rparam);
    if (UCS_PTR_IS_PTR(sp)) {
        ++g_am_rndv_outstanding;
    } else {
        if (!g.done) {
            ++g.op_errors;
            event("op_error", "api=am op=recv_data seq=%" PRIu64
                  " status=\"%s\"", hdr.seq,
                  ucs_status_string(UCS_PTR_STATUS(sp)));
            /* NO_IMM_CMPL: a NULL status here would be a UCP bug */
        }
        free(r->op.buf);
        free(r);
    }
    return UCS_OK;
}

static op_t *g_tag_recvs;
static uint64_t g_tag_post_idx, g_tag_head_idx;

static void tag_recv_post(op_t *op)
{
    ucp_request_param_t param = {0};

    op->active         = 1;
    op->done           = 0;
    op->req            = NULL;
    op->api            = API_TAG;
    op->post_idx       = g_tag_post_idx++;
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                         UCP_OP_ATTR_FIELD_USER_DATA |
                         UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    param.cb.recv      = tag_recv_cb;
    param.user_data    = op;
    op_track(op, ucp_tag_recv_nbx(g.worker, op->buf, op->buf_size,
                                  (MRC_TAG_MAGIC << 56) |
                                  (MRC_TAG_KIND_DATA << 48),
                                  MRC_TAG_HDR_MASK, &param));
}

/* Handle tag receives in posting order: that is the order they matched */
static void tag_recv_progress(void)
{
    op_t *op;
    uint64_t seq;
    int intact;

    for (;;) {
        op = &g_tag_recvs[g_tag_head_idx % g.tag_recvs];
        if (!op->done) {
            return;
        }
        if (op->status == UCS_OK) {
            seq    = op->tag & MRC_TAG_SEQ_MASK;
            intact = !check_payload(op->buf, op->length, API_TAG, seq,
                                    g_scratch) &&
                     (op->length == size_of(API_TAG, seq));
            stats_deliver(API_TAG, seq, op->length, intact, 0);
            if (!intact) {
                report_damage(API_TAG, seq, op->buf, op->length, g_scratch);
            }
        } else if (op->status != UCS_ERR_CANCELED) {
            check_status(op, "recv");
        }
        op_release(op);
        ++g_tag_head_idx;
        if (g.err_cb) {
            return;
        }
        tag_recv_post(op);
    }
}

static op_t g_stream_op;
static uint64_t g_stream_hdr[2];
static int g_stream_phase; /* 0: prefix, 1: payload */

static void stream_recv_post(void)
{
    ucp_request_param_t param = {0};
    op_t *op = &g_stream_op;
    void *buf;
    size_t len, length;

    op->active = 1;
    op->done   = 0;
    op->req    = NULL;
    op->api    = API_STREAM;
    if (g_stream_phase == 0) {
        buf = g_stream_hdr;
        len = sizeof(g_stream_hdr);
    } else {
        buf = op->buf;
        len = g_stream_hdr[1];
    }

    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                         UCP_OP_ATTR_FIELD_USER_DATA |
                         UCP_OP_ATTR_FIELD_FLAGS;
    param.flags        = UCP_STREAM_RECV_FLAG_WAITALL;
    param.cb.recv_stream = stream_recv_cb;
    param.user_data    = op;
    length             = 0;
    if (op_track(op, ucp_stream_recv_nbx(g.ep, buf, len, &length, &param))) {
        op->length = length;
    }
}

static void stream_recv_progress(void)
{
    op_t *op = &g_stream_op;
    int intact;

    while (op->active && op->done) {
        if (check_status(op, "recv") != 0) {
            op_release(op);
            return;
        }
        op_release(op);
        if (g_stream_phase == 0) {
            if ((g_stream_hdr[1] > g.max_size) || (g_stream_hdr[1] == 0)) {
                ++g.stats[API_STREAM].corrupt;
                event("corrupt", "api=stream bad_length=%" PRIu64,
                      g_stream_hdr[1]);
                return; /* the byte stream cannot be resynchronised */
            }
            g_stream_phase = 1;
        } else {
            intact = !check_payload(op->buf, op->length, API_STREAM,
                                    g_stream_hdr[0], g_scratch) &&
                     (op->length == size_of(API_STREAM, g_stream_hdr[0]));
            stats_deliver(API_STREAM, g_stream_hdr[0], op->length, intact, 0);
            g_stream_phase = 0;
        }
        if (g.err_cb) {
            return;
        }
        stream_recv_post();
    }
}

/*
 * --sleep: block on the worker's event fd as ucp_worker_wait() does, and
 * progress only when woken, for that many seconds (bounded: the poll times out
 * at the end of the phase). Shows that the library wakes a sleeping
 * application when it has work (probes, a failover) to do.
 */
static void sleep_phase(void)
{
    double end        = now() + g.sleep;
    uint64_t wakeups  = 0, busy = 0;
    struct pollfd pfd = {0};
    ucs_status_t status;
    int ret;

    if (g.sleep <= 0) {
        return;
    }

    status = ucp_worker_get_efd(g.worker, &pfd.fd);
    if (status != UCS_OK) {
        die("ucp_worker_get_efd failed: %s", ucs_status_string(status));
    }
    pfd.events = POLLIN;
    event("sleep_start", "secs=%.3f", g.sleep);
    while (!g.err_cb && (now() < end)) {
        status = ucp_worker_arm(g.worker);
        if (status == UCS_ERR_BUSY) {
            ++busy;
            progress();
            continue;
        } else if (status != UCS_OK) {
            die("ucp_worker_arm failed: %s", ucs_status_string(status));
        }
        ret = poll(&pfd, 1, (int)((end - now()) * 1000) + 1);
        if (ret == 1) {
            ++wakeups;
            progress();
        } else if ((ret < 0) && (errno != EINTR)) {
            die("poll failed: %s", strerror(errno));
        }
    }
    event("sleep_end", "wakeups=%" PRIu64 " busy=%" PRIu64, wakeups, busy);
    g.last_progress = now();
}

/*
 * --stall SEC@AT: the server stops calling into UCP for SEC seconds, AT
 * seconds into the traffic, as an application in a compute phase does. Its
 * sockets fill and the client's connections see a zero window; no lane may
 * fail over for that.
 */
static void stall_check(double traffic_start)
{
    static int stalled;
    double end;

    if ((g.stall <= 0) || stalled || (now() < traffic_start + g.stall_at)) {
        return;
    }

    stalled = 1;
    end     = now() + g.stall;
    event("stall_start", "secs=%.3f", g.stall);
    while (now() < end) {
        usleep(1000);
    }
    event("stall_end", "secs=%.3f", g.stall);
    g.last_progress = now();
}

static int server_expected_all(void)
{
    int api;

    for (api = API_TAG; api <= API_STREAM; ++api) {
        if (g.stats[api].received < g.peer_sent[api]) {
            return 0;
        }
    }
    return 1;
}

static int run_server(void)
{
    ctrl_msg_t setup = {0}, fin, report = {0}, hello;
    op_t fin_op, hello_op;
    void *rkey_buf;
    size_t rkey_len;
    ucs_status_t status;
    double deadline, traffic_start;
    int i, api;

    if (g.conn_sockaddr) {
        connect_sockaddr();
    } else {
        connect_address();
    }

    /* the client says what it will send */
    g.last_progress = now();
    ctrl_recv_post(&hello_op, &hello, CTRL_HELLO);
    wait_op(&hello_op, "hello");
    if (!hello_op.done || (hello_op.status != UCS_OK) ||
        (hello.num_sizes == 0) || (hello.num_sizes > MRC_MAX_SIZES)) {
        if (!g.err_cb && !g.hang) {
            die("no valid hello message from the client");
        }
        ctrl_recv_cancel(&hello_op);
        return 0;
    }
    op_release(&hello_op);
    g.num_sizes = hello.num_sizes;
    g.max_size  = 0;
    for (i = 0; i < g.num_sizes; ++i) {
        g.sizes[i]  = hello.sizes[i];
        g.max_size  = (g.sizes[i] > g.max_size) ? g.sizes[i] : g.max_size;
    }
    for (api = 0; api < API_LAST; ++api) {
        g.api_enabled[api] = !!hello.apis[api];
    }
    map_region();

    g_scratch   = xmalloc(g.max_size + MRC_STREAM_PREFIX);
    g_tag_recvs = calloc(g.tag_recvs, sizeof(*g_tag_recvs));
    for (i = 0; i < g.tag_recvs; ++i) {
        g_tag_recvs[i].buf_size = g.max_size;
        g_tag_recvs[i].buf      = xmalloc(g.max_size);
    }
    g_stream_op.buf = xmalloc(g.max_size);

    for (i = 0; i < g.tag_recvs; ++i) {
        tag_recv_post(&g_tag_recvs[i]);
    }
    stream_recv_post();
    ctrl_recv_post(&fin_op, &fin, CTRL_FIN);

    status = ucp_rkey_pack(g.context, g.memh, &rkey_buf, &rkey_len);
    if ((status != UCS_OK) || (rkey_len > MRC_RKEY_MAX)) {
        die("ucp_rkey_pack failed: %s", ucs_status_string(status));
    }
    setup.type     = CTRL_SETUP;
    setup.rma_addr = (uintptr_t)g.region;
    setup.rkey_len = rkey_len;
    memcpy(setup.rkey, rkey_buf, rkey_len);
    ucp_rkey_buffer_release(rkey_buf);
    g.last_progress = now();
    status = ctrl_send(&setup);
    if (status != UCS_OK) {
        event("setup_failed", "status=\"%s\"", ucs_status_string(status));
    }
    sleep_phase();

    /* receive until FIN says how much was sent and all of it arrived */
    deadline      = 0;
    traffic_start = now();
    while (!g.err_cb && !g.hang) {
        stall_check(traffic_start);
        progress();
        tag_recv_progress();
        stream_recv_progress();
        if (fin_op.done && !g.fin_received) {
            g.fin_received = 1;
            memcpy(g.peer_sent, fin.sent, sizeof(g.peer_sent));
            /* everything was sent before FIN: what has not arrived after
             * the settle time is lost */
            deadline = now() + g.settle;
        }
        if (g.fin_received && server_expected_all()) {
            break;
        }
        if ((deadline > 0) && (now() > deadline)) {
            break; /* what is missing is lost */
        }
        if (!g.fin_received && (now() - g.last_progress > g.hang_timeout)) {
            g.hang = 1;
            event("hang", "waiting_for=fin");
        }
    }

    /* rendezvous AM payloads still arriving */
    deadline = now() + g.hang_timeout;
    while (!g.err_cb && (g_am_rndv_outstanding > 0)) {
        progress();
        if (now() > deadline) {
            g.hang = 1;
            event("hang", "waiting_for=am_data outstanding=%u",
                  g_am_rndv_outstanding);
            break;
        }
    }

    for (api = API_TAG; api <= API_STREAM; ++api) {
        stats_finish(api, g.fin_received ? g.peer_sent[api] :
                                           g.stats[api].max_seen);
    }

    if (g.fin_received && !g.err_cb) {
        report.type       = CTRL_REPORT;
        report.violations = violations();
        for (api = 0; api < API_LAST; ++api) {
            report.sent[api] = g.stats[api].received;
        }
        ctrl_send(&report);
    }

    g.done = 1;
    ctrl_recv_cancel(&fin_op);
    return 0;
}

/* ---------------------------------------------------------------------------
 * Client (sender)
 * ------------------------------------------------------------------------ */

enum {
    INJECT_NONE,
    INJECT_SKIP,    /* never send seq N: the receiver must report it lost */
    INJECT_DUP,     /* send seq N twice: a duplicate */
    INJECT_SWAP,    /* send N+1 before N: a reorder */
    INJECT_CORRUPT  /* flip a payload bit of seq N: a corruption */
};

static const char *inject_names[] = {"none", "skip", "dup", "swap", "corrupt"};

/* Self-test: which tag sequence number to send instead of seq */
static uint64_t inject_tag_seq(uint64_t seq)
{
    uint64_t n = g.inject_seq;

    switch (g.inject) {
    case INJECT_SKIP:
        return (seq >= n) ? seq + 1 : seq;
    case INJECT_DUP:
        return (seq > n) ? seq - 1 : seq;
    case INJECT_SWAP:
        return (seq == n) ? n + 1 : (seq == n + 1) ? n : seq;
    default:
        return seq;
    }
}

static op_t *g_ops;
static op_t g_rma_op, g_amo_op;

static void issue_send(op_t *op, int api)
{
    ucp_request_param_t param = {0};
    uint64_t seq = g.sent[api]++;
    ucs_status_ptr_t sp;

    op->active = 1;
    op->done   = 0;
    op->req    = NULL;
    op->api    = api;
    op->seq    = seq;
    op->size   = size_of(api, seq);
    op->phase  = 0;
    op->t_post = wall();

    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                         UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.send      = send_cb;
    param.user_data    = op;

    switch (api) {
    case API_TAG:
        seq      = inject_tag_seq(seq);
        op->seq  = seq;
        op->size = size_of(api, seq);
        fill_payload(op->buf, op->size, api, seq);
        if ((g.inject == INJECT_CORRUPT) && (seq == g.inject_seq)) {
            op->buf[op->size - 1] ^= 1;
        }
        sp = ucp_tag_send_nbx(g.ep, op->buf, op->size,
                              (MRC_TAG_MAGIC << 56) |
                              (MRC_TAG_KIND_DATA << 48) | seq, &param);
        break;
    case API_AM:
        fill_payload(op->buf, op->size, api, seq);
        op->hdr.seq  = seq;
        op->hdr.size = op->size;
        sp = ucp_am_send_nbx(g.ep, MRC_AM_ID, &op->hdr, sizeof(op->hdr),
                             op->buf, op->size, &param);
        break;
    default: /* API_STREAM */
        ((uint64_t*)op->buf)[0] = seq;
        ((uint64_t*)op->buf)[1] = op->size;
        fill_payload(op->buf + MRC_STREAM_PREFIX, op->size, api, seq);
        sp = ucp_stream_send_nbx(g.ep, op->buf, op->size + MRC_STREAM_PREFIX,
                                 &param);
        break;
    }
    op_track(op, sp);
}

static void rma_step(op_t *op)
{
    ucp_request_param_t param = {0};
    size_t max = g.region_size - MRC_RMA_OFFSET;

    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                         UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.send      = send_cb;
    param.user_data    = op;
    op->done           = 0;
    op->t_post         = wall();
    if (op->req != NULL) {
        ucp_request_free(op->req);
        op->req = NULL;
    }

    switch (op->phase) {
    case 0: /* put the payload */
        op->size = size_of(API_RMA, op->seq);
        if (op->size > max) {
            op->size = max;
        }
        fill_payload(op->buf, op->size, API_RMA, op->seq);
        op_track(op, ucp_put_nbx(g.ep, op->buf, op->size,
                                 g.remote_addr + MRC_RMA_OFFSET, g.rkey,
                                 &param));
        break;
    case 1: /* make it visible */
        op_track(op, ucp_ep_flush_nbx(g.ep, &param));
        break;
    case 2: /* read it back */
        memset(op->buf, 0, op->size);
        op_track(op, ucp_get_nbx(g.ep, op->buf, op->size,
                                 g.remote_addr + MRC_RMA_OFFSET, g.rkey,
                                 &param));
        break;
    }
}

static void rma_start(op_t *op)
{
    op->active = 1;
    op->api    = API_RMA;
    op->seq    = g.sent[API_RMA]++;
    op->phase  = 0;
    rma_step(op);
}

static void amo_start(op_t *op)
{
    ucp_request_param_t param = {0};
    static uint64_t one = 1;

    op->active         = 1;
    op->done           = 0;
    op->req            = NULL;
    op->api            = API_AMO;
    op->seq            = g.sent[API_AMO]++;
    op->result         = UINT64_MAX;
    op->phase          = 0;
    op->t_post         = wall();
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                         UCP_OP_ATTR_FIELD_USER_DATA |
                         UCP_OP_ATTR_FIELD_DATATYPE |
                         UCP_OP_ATTR_FIELD_REPLY_BUFFER;
    param.cb.send      = send_cb;
    param.user_data    = op;
    param.datatype     = ucp_dt_make_contig(sizeof(uint64_t));
    param.reply_buffer = &op->result;
    op_track(op, ucp_atomic_op_nbx(g.ep, UCP_ATOMIC_OP_ADD, &one, 1,
                                   g.remote_addr + MRC_AMO_OFFSET, g.rkey,
                                   &param));
}

/* Handle a completion on the client; returns 1 if the op slot is free */
static int client_complete(op_t *op)
{
    int intact;

    op_slow_log(op);
    if (check_status(op, op->api == API_RMA ? "rma" : "send") != 0) {
        op_release(op);
        return 1;
    }

    switch (op->api) {
    case API_RMA:
        if (op->phase < 2) {
            ++op->phase;
            rma_step(op);
            return 0;
        }
        intact = !check_payload(op->buf, op->size, API_RMA, op->seq,
                                g_scratch);
        stats_deliver(API_RMA, op->seq, op->size, intact, 0);
        break;
    case API_AMO:
        /* one atomic in flight: each must fetch the count of the previous */
        intact = 1;
        if (op->result != op->seq) {
            intact = 0;
            event("amo_mismatch", "seq=%" PRIu64 " fetched=%" PRIu64, op->seq,
                  op->result);
        }
        stats_deliver(API_AMO, op->seq, sizeof(uint64_t), intact, 0);
        break;
    default:
        g.last_progress = now();
        ++g.tl_msgs;
        g.tl_bytes += op->size;
        break;
    }
    op_release(op);
    return 1;
}

static int client_outstanding(void)
{
    int i, n = g_rma_op.active + g_amo_op.active;

    for (i = 0; i < g.window; ++i) {
        n += g_ops[i].active;
    }
    return n;
}

static void client_poll(void)
{
    int i;

    progress();
    for (i = 0; i < g.window; ++i) {
        if (g_ops[i].active && g_ops[i].done) {
            client_complete(&g_ops[i]);
        }
    }
    if (g_rma_op.active && g_rma_op.done) {
        client_complete(&g_rma_op);
    }
    if (g_amo_op.active && g_amo_op.done) {
        client_complete(&g_amo_op);
    }
}

static void client_hang_check(const char *what)
{
    if (!g.hang && (now() - g.last_progress > g.hang_timeout)) {
        g.hang = 1;
        event("hang", "waiting_for=%s outstanding=%d", what,
              client_outstanding());
    }
}

static void client_cancel_all(void)
{
    int i;

    for (i = 0; i < g.window; ++i) {
        if (g_ops[i].req != NULL && !g_ops[i].done) {
            ucp_request_cancel(g.worker, g_ops[i].req);
        }
    }
}

static int run_client(void)
{
    ctrl_msg_t setup, fin = {0}, report, hello = {0};
    op_t setup_op, report_op;
    ucs_status_t status;
    double end;
    int i, api, next_api = 0, issued;
    uint64_t total = 0, amo_final = 0;

    g_scratch = xmalloc(g.max_size + MRC_STREAM_PREFIX);
    g_ops     = calloc(g.window, sizeof(*g_ops));
    for (i = 0; i < g.window; ++i) {
        g_ops[i].buf = xmalloc(g.max_size + MRC_STREAM_PREFIX);
    }
    g_rma_op.buf = xmalloc(g.max_size);

    if (g.conn_sockaddr) {
        connect_sockaddr();
    } else {
        connect_address();
    }

    ctrl_recv_post(&setup_op, &setup, CTRL_SETUP);
    ctrl_recv_post(&report_op, &report, CTRL_REPORT);
    g.final_op      = &report_op;
    g.last_progress = now();
    hello.type      = CTRL_HELLO;
    hello.num_sizes = g.num_sizes;
    for (i = 0; i < g.num_sizes; ++i) {
        hello.sizes[i] = g.sizes[i];
    }
    for (api = 0; api < API_LAST; ++api) {
        hello.apis[api] = g.api_enabled[api];
    }
    ctrl_send(&hello);
    wait_op(&setup_op, "setup");
    if (!setup_op.done || (setup_op.status != UCS_OK)) {
        if (!g.err_cb) {
            die("no setup message from the server");
        }
        goto out;
    }
    op_release(&setup_op);
    status = ucp_ep_rkey_unpack(g.ep, setup.rkey, &g.rkey);
    if (status != UCS_OK) {
        die("ucp_ep_rkey_unpack failed: %s", ucs_status_string(status));
    }
    g.remote_addr = setup.rma_addr;
    g.region_size = MRC_RMA_OFFSET + g.max_size;
    sleep_phase();

    /* stream traffic, a window of operations at a time */
    g.t0 = now();
    end  = g.t0 + g.duration;
    g.last_progress = now();
    while (!g.err_cb && !g.hang && (now() < end) && !g_stop &&
           ((g.count == 0) || (total < g.count))) {
        issued = 0;
        for (i = 0; (i < API_LAST) && !issued; ++i) {
            api      = next_api;
            next_api = (next_api + 1) % API_LAST;
            if (!g.api_enabled[api]) {
                continue;
            }
            if (api == API_RMA) {
                if (!g_rma_op.active) {
                    rma_start(&g_rma_op);
                    issued = 1;
                }
            } else if (api == API_AMO) {
                if (!g_amo_op.active) {
                    amo_start(&g_amo_op);
                    issued = 1;
                }
            } else {
                for (int s = 0; s < g.window; ++s) {
                    if (!g_ops[s].active) {
                        issue_send(&g_ops[s], api);
                        issued = 1;
                        break;
                    }
                }
            }
        }
        total += issued;
        client_poll();
        client_hang_check("send");
    }

    /* drain */
    while (!g.err_cb && !g.hang && client_outstanding()) {
        client_poll();
        client_hang_check("drain");
    }
    if (g.err_cb || g.hang) {
        goto out;
    }

    /* the server's atomic counter must equal the number of atomics */
    if (g.sent[API_AMO] > 0) {
        g_amo_op.api = API_AMO;
        g_amo_op.seq = 0;
        g_amo_op.active = 1;
        g_amo_op.done = 0;
        {
            ucp_request_param_t param = {0};
            param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                 UCP_OP_ATTR_FIELD_USER_DATA;
            param.cb.send      = send_cb;
            param.user_data    = &g_amo_op;
            op_track(&g_amo_op, ucp_get_nbx(g.ep, &amo_final, sizeof(amo_final),
                                            g.remote_addr + MRC_AMO_OFFSET,
                                            g.rkey, &param));
        }
        if ((wait_op(&g_amo_op, "amo_final") == UCS_OK) &&
            (amo_final != g.sent[API_AMO])) {
            ++g.stats[API_AMO].corrupt;
            event("amo_mismatch", "final=%" PRIu64 " expected=%" PRIu64,
                  amo_final, g.sent[API_AMO]);
        }
        op_release(&g_amo_op);
    }

    fin.type = CTRL_FIN;
    g.fin_sent = 1;
    memcpy(fin.sent, g.sent, sizeof(fin.sent));
    if ((g.inject == INJECT_SKIP) && (g.sent[API_TAG] > g.inject_seq)) {
        ++fin.sent[API_TAG]; /* the skipped number was "sent" */
    }
    status = ctrl_send(&fin);
    if (status == UCS_OK) {
        g.last_progress = now();
        wait_op(&report_op, "report");
        if (report_op.done && (report_op.status == UCS_OK)) {
            g.report_received = 1;
            g.peer_violations = report.violations;
        }
    }

out:
    g.done     = 1;
    g.final_op = NULL; /* (on this stack) */
    for (api = API_RMA; api <= API_AMO; ++api) {
        stats_finish(api, g.stats[api].max_seen);
    }
    client_cancel_all();
    ctrl_recv_cancel(&report_op);
    if (!setup_op.done) {
        ctrl_recv_cancel(&setup_op);
    }
    return 0;
}

/* ---------------------------------------------------------------------------
 * Teardown and report
 * ------------------------------------------------------------------------ */

static void server_cancel_recvs(void)
{
    int i;

    if (!g.server || (g_tag_recvs == NULL)) {
        return;
    }
    for (i = 0; i < g.tag_recvs; ++i) {
        if (g_tag_recvs[i].active) {
            ctrl_recv_cancel(&g_tag_recvs[i]);
        }
    }
    /* a stream receive ends when its endpoint is closed */
    if (g_stream_op.req != NULL) {
        ucp_request_free(g_stream_op.req);
        g_stream_op.req = NULL;
    }
}

static void close_ep(void)
{
    ucp_request_param_t param = {0};
    ucs_status_ptr_t sp;
    double deadline;

    close_extra_eps();
    if (g.ep == NULL) {
        return;
    }
    if (g.print_info) {
        /* the endpoint's lanes and sequencing counters, for the test */
        ucp_ep_print_info(g.ep, stdout);
    }
    if (g.rkey != NULL) {
        ucp_rkey_destroy(g.rkey);
    }
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags        = (g.err_cb || g.hang) ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    sp                 = ucp_ep_close_nbx(g.ep, &param);
    if (UCS_PTR_IS_PTR(sp)) {
        deadline = now() + 5;
        while ((ucp_request_check_status(sp) == UCS_INPROGRESS) &&
               (now() < deadline)) {
            ucp_worker_progress(g.worker);
        }
        if (ucp_request_check_status(sp) == UCS_INPROGRESS) {
            /* a flush that cannot finish: force the close */
            ucp_request_cancel(g.worker, sp);
            event("close_timeout", NULL);
        }
        ucp_request_free(sp);
    }
    g.ep = NULL;
}

/* Let the peer close first: progress until its close is reported (UCX
 * reports a client/server peer's close with the error callback) */
static void linger(void)
{
    double end = now() + g.linger;

    if ((g.linger <= 0) || (g.ep == NULL) || g.hang ||
        (g.err_cb && !g.peer_closed)) {
        return;
    }

    while (!g.peer_closed && (now() < end)) {
        progress();
    }
    event("linger_end", "peer_closed=%d", g.peer_closed);
}

static int print_result(void)
{
    struct rusage usage;
    const char *status;
    uint64_t v = violations() + g.peer_violations;
    int api, rc;

    if (g.hang) {
        status = "hang";
        rc     = 3;
    } else if (v > 0) {
        status = "violation";
        rc     = 1;
    } else if (g.err_cb || g.op_errors) {
        status = "error";
        rc     = 2;
    } else if (!g.server && !g.report_received) {
        status = "no_report";
        rc     = 3;
    } else {
        status = "ok";
        rc     = 0;
    }

    printf("RESULT role=%s status=%s elapsed=%.3f", g.server ? "server" : "client",
           status, now() - g.t0);
    for (api = 0; api < API_LAST; ++api) {
        if (!g.api_enabled[api]) {
            continue;
        }
        if (g.server ? (api <= API_STREAM) : (api >= API_RMA)) {
            printf(" %s_recv=%" PRIu64 " %s_bytes=%" PRIu64, api_names[api],
                   g.stats[api].received, api_names[api], g.stats[api].bytes);
        }
        if (!g.server) {
            printf(" %s_sent=%" PRIu64, api_names[api], g.sent[api]);
        }
    }
    {
        uint64_t lost = 0, dup = 0, reorder = 0, corrupt = 0;
        for (api = 0; api < API_LAST; ++api) {
            lost    += g.stats[api].lost;
            dup     += g.stats[api].dup;
            reorder += g.stats[api].reorder;
            corrupt += g.stats[api].corrupt;
        }
        printf(" lost=%" PRIu64 " dup=%" PRIu64 " reorder=%" PRIu64
               " corrupt=%" PRIu64, lost, dup, reorder, corrupt);
        if (g.server) {
            printf(" am_late=%" PRIu64, g.stats[API_AM].late);
        }
    }
    if (!g.server) {
        printf(" peer_violations=%" PRIu64 " report=%d", g.peer_violations,
               g.report_received);
    }
    printf(" err_cb=%d op_errors=%" PRIu64 " hang=%d", g.err_cb, g.op_errors,
           g.hang);
    if (getrusage(RUSAGE_SELF, &usage) == 0) {
        /* the peak resident set, for memory bounds (kB) */
        printf(" max_rss_kb=%ld", usage.ru_maxrss);
    }
    if (g.err_cb) {
        printf(" err_status=\"%s\"", ucs_status_string(g.err_status));
    }
    printf("\n");
    fflush(stdout);
    return rc;
}

static void usage(void)
{
    fprintf(stderr,
"Usage: mr_check --server [options]\n"
"       mr_check --client SERVER_IP [options]\n"
"  --conn sockaddr|address  connect by listener (default) or by worker\n"
"                           addresses exchanged over a TCP socket\n"
"  --listen IP              server: address to listen on (default: any)\n"
"  --port N                 listener / out-of-band port (default 13337)\n"
"  --err-mode peer|none     endpoint error handling mode (default peer)\n"
"  --apis LIST              tag,am,stream,rma,amo (default: all)\n"
"  --sizes LIST             message sizes, >= 8, k/m suffixes\n"
"                           (default 8,1k,8k,64k,1m,4m)\n"
"  --duration SEC           client: how long to send (default 5)\n"
"  --count N                client: stop after N operations (0: no limit)\n"
"  --window N               client: operations in flight (default 8)\n"
"  --interval SEC           timeline interval (default 0.5)\n"
"  --rails LIST             network devices whose counters go in the timeline\n"
"  --hang-timeout SEC       no progress for that long is a hang (default 20)\n"
"  --connect-timeout SEC    (default 20)\n"
"  --extra-eps N            --conn address: N more (idle) endpoints to the peer\n"
"  --settle SEC             server: after the client's last message, how long\n"
"                           a missing message may still arrive (default 3)\n"
"  --linger SEC             after the exchange, progress until the peer's close\n"
"                           is reported (the peer closes first) or SEC passed;\n"
"                           EVENT linger_end peer_closed=0|1\n"
"  --sleep SEC              before the traffic, sleep on the worker's event\n"
"                           fd (as ucp_worker_wait()) for SEC, progressing\n"
"                           only when woken (EVENT sleep_end wakeups=N)\n"
"  --stall SEC@AT           server: SEC seconds without calling into UCP,\n"
"                           AT seconds into the traffic (a compute phase)\n"
"  --slow-log MS            client: a SLOW record (post and completion wall\n"
"                           times) per operation that took >= MS\n"
"  SIGUSR1 ends the client's traffic as if --duration had passed\n"
"  --am-order strict|striped  AM messages must complete in order; or, as\n"
"                           UCP does with fragments striped over lanes, a\n"
"                           multi-fragment one may complete late (counted as\n"
"                           am_late, not a violation). Default: striped if\n"
"                           UCX_MAX_EAGER_RAILS > 1 (and not failover with\n"
"                           UCX_MULTIRAIL_STRIPE_AM=n), else strict\n"
"  --am-single-max SIZE     longest AM payload that is one fragment (4k)\n"
"  --info                   print the endpoint's information (lanes,\n"
"                           sequencing counters) before closing it\n"
"  --inject KIND@N          client self-test: skip|dup|swap|corrupt the tag\n"
"                           message with sequence number N\n");
    exit(4);
}

static int env_is_yes(const char *name, int dflt)
{
    const char *v = getenv(name);

    if (v == NULL) {
        return dflt;
    }
    return !strcasecmp(v, "y") || !strcasecmp(v, "yes") ||
           !strcasecmp(v, "on") || !strcmp(v, "1");
}

/* Whether UCP stripes AM fragments over lanes, from the environment the
 * tests set (a value from ucx.conf is not seen: pass --am-order then) */
static int default_am_striped(void)
{
    const char *eager = getenv("UCX_MAX_EAGER_RAILS");

    if ((eager == NULL) || (atoi(eager) <= 1)) {
        return 0;
    }
    /* with failover and UCX_MULTIRAIL_STRIPE_AM=n, every fragment takes the
     * am lane */
    return !env_is_yes("UCX_MULTIRAIL_FAILOVER", 0) ||
           env_is_yes("UCX_MULTIRAIL_STRIPE_AM", 1);
}

/* 0 for @a no, 1 for @a yes, else the usage */
static int parse_choice(const char *s, const char *no, const char *yes)
{
    if (!strcmp(s, no)) {
        return 0;
    } else if (!strcmp(s, yes)) {
        return 1;
    }

    usage();
    return -1;
}

static size_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);

    switch (*end) {
    case 'k': case 'K': v *= 1024; ++end; break;
    case 'm': case 'M': v *= 1024 * 1024; ++end; break;
    }
    if ((*end != '\0') || (v < 8) || (v > (256.0 * 1024 * 1024))) {
        fprintf(stderr, "mr_check: bad size '%s' (8 B .. 256 MiB)\n", s);
        exit(4);
    }
    return (size_t)v;
}

static void parse_list(char *arg, void (*cb)(const char*))
{
    char *save = NULL, *tok;

    for (tok = strtok_r(arg, ",", &save); tok != NULL;
         tok = strtok_r(NULL, ",", &save)) {
        cb(tok);
    }
}

static void add_api(const char *name)
{
    int api;

    for (api = 0; api < API_LAST; ++api) {
        if (!strcmp(name, api_names[api])) {
            g.api_enabled[api] = 1;
            return;
        }
    }
    fprintf(stderr, "mr_check: unknown API '%s'\n", name);
    exit(4);
}

static void add_size(const char *s)
{
    if (g.num_sizes == MRC_MAX_SIZES) {
        fprintf(stderr, "mr_check: too many sizes\n");
        exit(4);
    }
    g.sizes[g.num_sizes++] = parse_size(s);
}

static void add_rail(const char *s)
{
    if (g.num_rails < MRC_MAX_RAILS) {
        g.rails[g.num_rails++] = s;
    }
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"server", no_argument, 0, 'S'},
        {"client", required_argument, 0, 'C'},
        {"conn", required_argument, 0, 'c'},
        {"listen", required_argument, 0, 'l'},
        {"port", required_argument, 0, 'p'},
        {"err-mode", required_argument, 0, 'e'},
        {"apis", required_argument, 0, 'a'},
        {"sizes", required_argument, 0, 's'},
        {"duration", required_argument, 0, 'd'},
        {"count", required_argument, 0, 'n'},
        {"window", required_argument, 0, 'w'},
        {"interval", required_argument, 0, 'i'},
        {"rails", required_argument, 0, 'r'},
        {"hang-timeout", required_argument, 0, 'H'},
        {"connect-timeout", required_argument, 0, 'T'},
        {"inject", required_argument, 0, 'I'},
        {"settle", required_argument, 0, 'W'},
        {"extra-eps", required_argument, 0, 'X'},
        {"sleep", required_argument, 0, 'Z'},
        {"stall", required_argument, 0, 'Y'},
        {"slow-log", required_argument, 0, 'L'},
        {"linger", required_argument, 0, 'G'},
        {"am-order", required_argument, 0, 'O'},
        {"am-single-max", required_argument, 0, 'M'},
        {"info", no_argument, 0, 'P'},
        {0, 0, 0, 0}
    };
    int c, api, any_api = 0, rc;
    char sizes_str[512] = "", apis_str[64] = "";

    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGUSR1, on_sigusr1);
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'S': g.server = 1; break;
        case 'C': g.peer = optarg; break;
        case 'c': g.conn_sockaddr = parse_choice(optarg, "address", "sockaddr"); break;
        case 'l': g.listen_ip = optarg; break;
        case 'p': g.port = atoi(optarg); break;
        case 'e': g.err_mode_peer = parse_choice(optarg, "none", "peer"); break;
        case 'a': any_api = 1; parse_list(optarg, add_api); break;
        case 's': parse_list(optarg, add_size); break;
        case 'd': g.duration = atof(optarg); break;
        case 'n': g.count = strtoull(optarg, NULL, 0); break;
        case 'w': g.window = atoi(optarg); break;
        case 'i': g.interval = atof(optarg); break;
        case 'r': parse_list(optarg, add_rail); break;
        case 'H': g.hang_timeout = atof(optarg); break;
        case 'T': g.connect_timeout = atof(optarg); break;
        case 'W': g.settle = atof(optarg); break;
        case 'G': g.linger = atof(optarg); break;
        case 'X': g.extra_eps = atoi(optarg); break;
        case 'Z': g.sleep = atof(optarg); break;
        case 'Y': {
            char *at = strchr(optarg, '@');
            if (at == NULL) {
                usage();
            }
            g.stall    = atof(optarg);
            g.stall_at = atof(at + 1);
            break;
        }
        case 'L': g.slow_log = atof(optarg) / 1000.0; break;
        case 'O': g.am_striped = parse_choice(optarg, "strict", "striped"); break;
        case 'M': g.am_single_max = parse_size(optarg); break;
        case 'P': g.print_info = 1; break;
        case 'I': {
            char *at = strchr(optarg, '@');
            if (at == NULL) {
                usage();
            }
            *at = '\0';
            for (g.inject = INJECT_CORRUPT; g.inject > INJECT_NONE; --g.inject) {
                if (!strcmp(optarg, inject_names[g.inject])) {
                    break;
                }
            }
            if (g.inject == INJECT_NONE) {
                usage();
            }
            g.inject_seq = strtoull(at + 1, NULL, 0);
            break;
        }
        default: usage();
        }
    }
    if ((g.server == (g.peer != NULL)) || (optind != argc) ||
        (g.window < 1) || (g.window > 1024) || (g.interval <= 0) ||
        (g.hang_timeout <= 0)) {
        usage();
    }
    if (!any_api) {
        for (api = 0; api < API_LAST; ++api) {
            g.api_enabled[api] = 1;
        }
    }
    if (g.am_striped < 0) {
        g.am_striped = default_am_striped();
    }
    if (g.num_sizes == 0) {
        char def[] = "8,1k,8k,64k,1m,4m";
        parse_list(def, add_size);
    }
    for (c = 0; c < g.num_sizes; ++c) {
        if (g.sizes[c] > g.max_size) {
            g.max_size = g.sizes[c];
        }
        snprintf(sizes_str + strlen(sizes_str),
                 sizeof(sizes_str) - strlen(sizes_str), "%s%zu",
                 c ? "," : "", g.sizes[c]);
    }
    for (api = 0; api < API_LAST; ++api) {
        if (g.api_enabled[api]) {
            snprintf(apis_str + strlen(apis_str),
                     sizeof(apis_str) - strlen(apis_str), "%s%s",
                     apis_str[0] ? "," : "", api_names[api]);
        }
    }
    if (g.tag_recvs > MRC_MAX_TAG_RECVS) {
        g.tag_recvs = MRC_MAX_TAG_RECVS;
    }

    g.t0 = now();
    g.tl_next = g.t0 + g.interval;
    printf("START role=%s conn=%s err_mode=%s apis=%s sizes=%s inject=%s "
           "am_order=%s pid=%d\n", g.server ? "server" : "client",
           g.conn_sockaddr ? "sockaddr" : "address",
           g.err_mode_peer ? "peer" : "none", apis_str, sizes_str,
           inject_names[g.inject], g.am_striped ? "striped" : "strict",
           getpid());
    init_ucp();
    timeline(1);
    if (g.server) {
        run_server();
    } else {
        run_client();
    }
    linger();
    timeline(1);
    rc = print_result();

    close_ep();
    server_cancel_recvs();
    if (g.listener != NULL) {
        ucp_listener_destroy(g.listener);
    }
    if (g.memh != NULL) {
        ucp_mem_unmap(g.context, g.memh);
    }
    ucp_worker_destroy(g.worker);
    ucp_cleanup(g.context);
    return rc;
}
