/**
 * Copyright (C) Multi-rail failover for UCX authors. 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 *
 * mr_lat: tag ping-pong latency with failover off and on, in one process.
 *
 * Each side opens two UCP contexts, one with UCX_MULTIRAIL_FAILOVER=n and
 * one with =y (everything else from the environment), each with its own
 * worker and an endpoint to the peer's worker of the same variant (worker
 * addresses exchanged over a TCP connection to SERVER_IP:PORT, as
 * ucx_perftest does; error handling mode none, as ucx_perftest's default).
 * The client then runs batches of ping-pongs, alternating the two in the order
 * off, on, on, off, off, on, ... so that a drift of the machine's round trip
 * (between runs it is ±10 % and bimodal on the test bed) hits both alike.
 * It prints each variant's median round trip / 2 over all iterations and
 * the median and quartiles of the ratios on / off of neighbouring batches.
 *
 * With -r WINDOW, the message rate instead: an iteration is WINDOW tagged
 * messages from the client, all posted before any is waited for, and one
 * reply from the server once it received them all; the figures are then
 * the time per message (us) of each iteration, and its inverse the rate.
 *
 * Usage: mr_lat [-v] [-r WINDOW] [-p PORT] [-b BATCHES] [-k ITERS] [-s SIZE]
 *        [SERVER_IP]
 *        (no SERVER_IP: the server; -v: both endpoints' lanes on stderr
 *        after the warm-up, with failover's state of the "on" one)
 */

#define _GNU_SOURCE
#include <ucp/api/ucp.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MR_LAT_TAG 0x1a7

static struct {
    ucp_context_h context[2];
    ucp_worker_h  worker[2];
    ucp_ep_h      ep[2];
    int           sock;
    int           is_server;
    const char    *server_ip;
    int           port;
    int           verbose;
    int           batches;
    int           iters;
    size_t        size;
    int           window;   /* message rate: messages per iteration */
    void          **reqs;
} g = {.port = 13400, .batches = 200, .iters = 1000, .size = 8};

static void die(const char *what, ucs_status_t status)
{
    fprintf(stderr, "mr_lat: %s: %s\n", what, ucs_status_string(status));
    exit(1);
}

static double now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static void wait_req(int v, void *req)
{
    ucs_status_t status;

    if (req == NULL) {
        return;
    }

    if (UCS_PTR_IS_ERR(req)) {
        die("request", UCS_PTR_STATUS(req));
    }

    while ((status = ucp_request_check_status(req)) == UCS_INPROGRESS) {
        ucp_worker_progress(g.worker[v]);
    }

    ucp_request_free(req);
    if (status != UCS_OK) {
        die("request completed", status);
    }
}

/* Send or receive exactly @a len bytes on the out-of-band connection */
static void oob_io(void *buf, size_t len, int send_it)
{
    ssize_t n;

    while (len > 0) {
        n = send_it ? send(g.sock, buf, len, 0) : recv(g.sock, buf, len, 0);
        if (n <= 0) {
            perror("mr_lat: out-of-band connection");
            exit(1);
        }
        buf  = (char*)buf + n;
        len -= n;
    }
}

/* The out-of-band connection: the server accepts one client */
static void oob_connect(void)
{
    struct sockaddr_in addr = {0};
    int one = 1, lsock;

    addr.sin_family = AF_INET;
    addr.sin_port   = htons(g.port);
    if (g.is_server) {
        addr.sin_addr.s_addr = INADDR_ANY;
        lsock = socket(AF_INET, SOCK_STREAM, 0);
        setsockopt(lsock, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if ((lsock < 0) ||
            (bind(lsock, (struct sockaddr*)&addr, sizeof(addr)) != 0) ||
            (listen(lsock, 1) != 0) ||
            ((g.sock = accept(lsock, NULL, NULL)) < 0)) {
            perror("mr_lat: listen");
            exit(1);
        }
        close(lsock);
        return;
    }

    inet_pton(AF_INET, g.server_ip, &addr.sin_addr);
    g.sock = socket(AF_INET, SOCK_STREAM, 0);
    if ((g.sock < 0) ||
        (connect(g.sock, (struct sockaddr*)&addr, sizeof(addr)) != 0)) {
        perror("mr_lat: connect");
        exit(1);
    }
}

/* Exchange the workers' addresses of variant @a v and connect to the
 * peer's */
static void connect_variant(int v)
{
    ucp_ep_params_t ep_params = {0};
    ucp_address_t *address;
    size_t length, peer_length;
    void *peer;
    ucs_status_t status;

    status = ucp_worker_get_address(g.worker[v], &address, &length);
    if (status != UCS_OK) {
        die("ucp_worker_get_address", status);
    }

    oob_io(&length, sizeof(length), 1);
    oob_io(address, length, 1);
    oob_io(&peer_length, sizeof(peer_length), 0);
    peer = malloc(peer_length);
    if (peer == NULL) {
        die("malloc", UCS_ERR_NO_MEMORY);
    }
    oob_io(peer, peer_length, 0);
    ucp_worker_release_address(g.worker[v], address);

    ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep_params.address    = peer;
    status = ucp_ep_create(g.worker[v], &ep_params, &g.ep[v]);
    free(peer);
    if (status != UCS_OK) {
        die("ucp_ep_create", status);
    }
}

static void open_variant(int v)
{
    ucp_params_t params          = {0};
    ucp_worker_params_t wparams  = {0};
    ucp_config_t *config;
    ucs_status_t status;

    status = ucp_config_read(NULL, NULL, &config);
    if (status != UCS_OK) {
        die("ucp_config_read", status);
    }

    status = ucp_config_modify(config, "MULTIRAIL_FAILOVER", v ? "y" : "n");
    if (status != UCS_OK) {
        die("UCX_MULTIRAIL_FAILOVER (a library without failover?)", status);
    }

    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features   = UCP_FEATURE_TAG;
    status            = ucp_init(&params, config, &g.context[v]);
    ucp_config_release(config);
    if (status != UCS_OK) {
        die("ucp_init", status);
    }

    wparams.field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
    status = ucp_worker_create(g.context[v], &wparams, &g.worker[v]);
    if (status != UCS_OK) {
        die("ucp_worker_create", status);
    }

}

/* One round trip on variant @a v: the client sends first */
static void ping_pong(int v, void *sbuf, void *rbuf)
{
    ucp_request_param_t param = {0};
    void *rreq, *sreq;

    rreq = ucp_tag_recv_nbx(g.worker[v], rbuf, g.size, MR_LAT_TAG,
                            (ucp_tag_t)-1, &param);
    if (g.is_server) {
        wait_req(v, rreq);
        sreq = ucp_tag_send_nbx(g.ep[v], sbuf, g.size, MR_LAT_TAG, &param);
        wait_req(v, sreq);
    } else {
        sreq = ucp_tag_send_nbx(g.ep[v], sbuf, g.size, MR_LAT_TAG, &param);
        wait_req(v, sreq);
        wait_req(v, rreq);
    }
}

/* One iteration of the message rate on variant @a v: the client sends
 * g.window messages, the server replies once it has them all */
static void burst(int v, void *sbuf, void *rbuf)
{
    ucp_request_param_t param = {0};
    void *rreq;
    int i;

    if (g.is_server) {
        for (i = 0; i < g.window; ++i) {
            g.reqs[i] = ucp_tag_recv_nbx(g.worker[v], rbuf, g.size,
                                         MR_LAT_TAG, (ucp_tag_t)-1, &param);
        }
        for (i = 0; i < g.window; ++i) {
            wait_req(v, g.reqs[i]);
        }
        wait_req(v, ucp_tag_send_nbx(g.ep[v], sbuf, g.size, MR_LAT_TAG,
                                     &param));
        return;
    }

    rreq = ucp_tag_recv_nbx(g.worker[v], rbuf, g.size, MR_LAT_TAG,
                            (ucp_tag_t)-1, &param);
    for (i = 0; i < g.window; ++i) {
        g.reqs[i] = ucp_tag_send_nbx(g.ep[v], sbuf, g.size, MR_LAT_TAG,
                                     &param);
    }
    for (i = 0; i < g.window; ++i) {
        wait_req(v, g.reqs[i]);
    }
    wait_req(v, rreq);
}

/* One iteration: a ping-pong, or a burst with -r; its time in us (a round
 * trip's half, or per message) */
static double iteration(int v, void *sbuf, void *rbuf)
{
    double t = now_us();

    if (g.window > 0) {
        burst(v, sbuf, rbuf);
        return (now_us() - t) / g.window;
    }

    ping_pong(v, sbuf, rbuf);
    return (now_us() - t) / 2;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double*)a, y = *(const double*)b;

    return (x > y) - (x < y);
}

/* The value at fraction @a q of the sorted array @a a of @a n */
static double quantile(double *a, int n, double q)
{
    qsort(a, n, sizeof(*a), cmp_double);
    return a[(int)(q * (n - 1) + 0.5)];
}

/* Variant of batch @a b: off, on, on, off, off, on, on, off, ... */
static int batch_variant(int b)
{
    return ((b % 4) == 1) || ((b % 4) == 2);
}

int main(int argc, char **argv)
{
    double *lat[2], *ratios, *batch_med;
    char *sbuf, *rbuf;
    int b, i, c, v, n[2] = {0, 0};
    double t, prev_med = 0;

    while ((c = getopt(argc, argv, "p:b:k:s:r:v")) != -1) {
        switch (c) {
        case 'v': g.verbose = 1; break;
        case 'r': g.window = atoi(optarg); break;
        case 'p': g.port = atoi(optarg); break;
        case 'b': g.batches = atoi(optarg); break;
        case 'k': g.iters = atoi(optarg); break;
        case 's': g.size = strtoul(optarg, NULL, 0); break;
        default:
            fprintf(stderr, "usage: mr_lat [-v] [-r WINDOW] [-p PORT] "
                            "[-b BATCHES] [-k ITERS] [-s SIZE] "
                            "[SERVER_IP]\n");
            return 2;
        }
    }

    g.is_server = (optind >= argc);
    g.server_ip = g.is_server ? NULL : argv[optind];
    if ((g.batches < 4) || (g.iters < 1) || (g.size < 1)) {
        fprintf(stderr, "mr_lat: need >= 4 batches, >= 1 iteration, >= 1 byte\n");
        return 2;
    }

    sbuf      = calloc(1, g.size);
    rbuf      = calloc(1, g.size);
    lat[0]    = calloc((size_t)g.batches * g.iters, sizeof(double));
    lat[1]    = calloc((size_t)g.batches * g.iters, sizeof(double));
    ratios    = calloc(g.batches, sizeof(double));
    batch_med = calloc(g.iters, sizeof(double));
    g.reqs    = calloc(g.window + 1, sizeof(void*));
    if (!sbuf || !rbuf || !lat[0] || !lat[1] || !ratios || !batch_med ||
        !g.reqs) {
        die("calloc", UCS_ERR_NO_MEMORY);
    }

    oob_connect();
    for (v = 0; v < 2; ++v) {
        open_variant(v);
        connect_variant(v);
    }

    /* warm-up: wireup completes, caches fill */
    for (v = 0; v < 2; ++v) {
        for (i = 0; i < ((g.window > 0) ? 100 : 1000); ++i) {
            iteration(v, sbuf, rbuf);
        }
    }

    if (g.verbose) {
        for (v = 0; v < 2; ++v) {
            fprintf(stderr, "failover %s:\n", v ? "on" : "off");
            ucp_ep_print_info(g.ep[v], stderr);
        }
    }

    for (b = 0; b < g.batches; ++b) {
        v = batch_variant(b);
        for (i = 0; i < g.iters; ++i) {
            batch_med[i] = iteration(v, sbuf, rbuf);
            if (!g.is_server) {
                lat[v][n[v]++] = batch_med[i];
            }
        }

        /* the other worker's timers and probes between batches */
        for (i = 0; i < 10; ++i) {
            ucp_worker_progress(g.worker[!v]);
        }

        if (g.is_server) {
            continue;
        }

        t = quantile(batch_med, g.iters, 0.5);
        if (b % 2) {
            /* neighbours: (off, on) or (on, off) */
            ratios[b / 2] = v ? (t / prev_med) : (prev_med / t);
        }
        prev_med = t;
    }

    if (!g.is_server) {
        double off = quantile(lat[0], n[0], 0.5);
        double on  = quantile(lat[1], n[1], 0.5);
        int pairs  = g.batches / 2;

        printf("RESULT size=%zu window=%d batches=%d iters=%d off_us=%.4f "
               "on_us=%.4f ratio=%.4f pair_ratio_median=%.4f "
               "pair_ratio_q1=%.4f pair_ratio_q3=%.4f\n",
               g.size, g.window, g.batches, g.iters, off, on, on / off,
               quantile(ratios, pairs, 0.5), quantile(ratios, pairs, 0.25),
               quantile(ratios, pairs, 0.75));
    }

    /* both sides are done (the client has the last reply): close */
    oob_io(&c, sizeof(c), !g.is_server);
    oob_io(&c, sizeof(c), g.is_server);
    for (v = 0; v < 2; ++v) {
        ucp_request_param_t param = {0};
        void *req;

        param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        param.flags        = UCP_EP_CLOSE_FLAG_FORCE;
        req                = ucp_ep_close_nbx(g.ep[v], &param);
        if (UCS_PTR_IS_PTR(req)) {
            while (ucp_request_check_status(req) == UCS_INPROGRESS) {
                ucp_worker_progress(g.worker[v]);
            }
            ucp_request_free(req);
        }
        ucp_worker_destroy(g.worker[v]);
        ucp_cleanup(g.context[v]);
    }

    close(g.sock);
    free(g.reqs);
    free(batch_med);
    free(ratios);
    free(lat[1]);
    free(lat[0]);
    free(rbuf);
    free(sbuf);
    return 0;
}
