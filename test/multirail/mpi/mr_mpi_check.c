/**
 * Copyright (C) Multi-rail failover for UCX authors. 2026. ALL RIGHTS RESERVED.
 *
 * See file LICENSE for terms.
 *
 * mr_mpi_check: MPI ranks (2 or more) exchange messages of mixed sizes (8 B
 * to 4 MiB) with every other rank, in both directions, and run an
 * MPI_Allreduce, for a given time; every payload is derived from (iteration,
 * size, sending rank) and checked byte by byte. With two ranks per host the
 * pairs on one host talk over shared memory, the others over the rails.
 * Prints "MPI_RESULT ok iterations=N bytes=B", or "mismatch" / "error"
 * instead of "ok", and a line per second so a stall is visible. Every MPI
 * call's return code is checked (MPI_ERRORS_RETURN): an MPI library that
 * reports an error and goes on must not pass for one that worked. Exit code
 * 0 only if every check passed.
 *
 * MR_MPI_QUIET_DIR (MPICH builds): before MPI_Finalize, every rank waits,
 * without calling MPI, until every rank has stopped calling MPI (a file per
 * rank in that directory). MPICH 4.0.2's MPI_Finalize closes its UCX
 * endpoints in flush mode and then blocks in a PMI barrier without
 * progressing UCX; UCT/TCP's flush waits for the peer to acknowledge a
 * zero-length PUT. A rank still inside its last MPI call acknowledges the
 * other's PUT, the other leaves for the barrier, and the first rank's own
 * PUT is never acknowledged: the job hangs after its result. Once no rank
 * progresses, each one's close sends its PUT before it progresses, ahead
 * of its acknowledgements on the same connection, so the peer answers it
 * before its own close completes.
 */

#include <mpi.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>


static const size_t sizes[] = {8, 1024, 8192, 65536, 1 << 20, 4 << 20};
#define NUM_SIZES (sizeof(sizes) / sizeof(sizes[0]))


/* the return code of an MPI call: an error ends the run as failed */
static int check(int ret, const char *call, int rank, long iter)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;

    if (ret == MPI_SUCCESS) {
        return 0;
    }

    MPI_Error_string(ret, msg, &len);
    printf("MPI_ERROR rank=%d iter=%ld call=%s: %.*s\n", rank, iter, call, len,
           msg);
    fflush(stdout);
    return 1;
}

static void fill(unsigned char *buf, size_t size, long iter, int rank)
{
    uint64_t x = (uint64_t)iter * 1000003u + size * 31u + (uint64_t)rank + 1;
    size_t i;

    for (i = 0; i < size; ++i) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        buf[i] = (unsigned char)x;
    }
}

static double now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* every rank stopped calling MPI (see above), 60 s at most in all; a rank
 * that failed only says it stopped (the others may be stuck in MPI) */
static void quiet_barrier(int rank, int nranks, int failed)
{
#ifdef MPICH_VERSION
    const char *dir = getenv("MR_MPI_QUIET_DIR");
    double deadline = now() + 60.0;
    char path[4096];
    FILE *f;
    int r;

    if ((dir == NULL) || (*dir == '\0')) {
        return;
    }

    snprintf(path, sizeof(path), "%s/quiet.%d", dir, rank);
    f = fopen(path, "w");
    if (f == NULL) {
        fprintf(stderr, "MPI_QUIET rank=%d: cannot create %s\n", rank, path);
        return;
    }
    fclose(f);
    if (failed) {
        return;
    }

    for (r = 0; r < nranks; ++r) {
        snprintf(path, sizeof(path), "%s/quiet.%d", dir, r);
        while ((access(path, F_OK) != 0) && (now() < deadline)) {
            usleep(10000);
        }
    }
#endif
}

int main(int argc, char **argv)
{
    double duration = (argc > 1) ? atof(argv[1]) : 10;
    size_t max = sizes[NUM_SIZES - 1];
    unsigned char *sbuf, *rbuf, *expect;
    double t0, next_report;
    long iter, bytes = 0;
    int rank, nranks, dist, to, from, bad = 0, done = 0, err = 0;
    long sum, want;
    size_t s;

    MPI_Init(&argc, &argv);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (nranks < 2) {
        fprintf(stderr, "mr_mpi_check needs 2 or more ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }

    sbuf   = malloc(max);
    rbuf   = malloc(max);
    expect = malloc(max);
    t0     = now();
    next_report = t0 + 1;

    for (iter = 0; !done; ++iter) {
        /* round dist: send to rank + dist, receive from rank - dist */
        for (dist = 1; (dist < nranks) && !err; ++dist) {
            to   = (rank + dist) % nranks;
            from = (rank + nranks - dist) % nranks;
            for (s = 0; s < NUM_SIZES; ++s) {
                fill(sbuf, sizes[s], iter, rank);
                err |= check(MPI_Sendrecv(sbuf, (int)sizes[s], MPI_BYTE, to,
                                          (int)s, rbuf, (int)sizes[s],
                                          MPI_BYTE, from, (int)s,
                                          MPI_COMM_WORLD, MPI_STATUS_IGNORE),
                             "MPI_Sendrecv", rank, iter);
                if (err) {
                    break;
                }
                fill(expect, sizes[s], iter, from);
                if (memcmp(expect, rbuf, sizes[s]) != 0) {
                    printf("MPI_MISMATCH rank=%d iter=%ld size=%zu from=%d\n",
                           rank, iter, sizes[s], from);
                    bad = 1;
                }
                bytes += sizes[s];
            }
        }

        if (err) {
            break;
        }

        /* sum of (iter + r) over all ranks r */
        sum  = iter + rank;
        want = nranks * iter + ((long)nranks * (nranks - 1)) / 2;
        if (check(MPI_Allreduce(MPI_IN_PLACE, &sum, 1, MPI_LONG, MPI_SUM,
                                MPI_COMM_WORLD),
                  "MPI_Allreduce", rank, iter)) {
            err = 1;
            break;
        }
        if (sum != want) {
            printf("MPI_MISMATCH rank=%d iter=%ld allreduce=%ld want=%ld\n",
                   rank, iter, sum, want);
            bad = 1;
        }

        /* both ranks stop at the same iteration */
        done = (now() - t0 > duration) || bad;
        if (check(MPI_Allreduce(MPI_IN_PLACE, &done, 1, MPI_INT, MPI_MAX,
                                MPI_COMM_WORLD),
                  "MPI_Allreduce", rank, iter)) {
            err = 1;
            break;
        }
        /* a reduction that "succeeded" with a wrong value, or a stop well
         * before the duration with nothing wrong: an error not reported */
        if ((done != 0) && (done != 1)) {
            printf("MPI_ERROR rank=%d iter=%ld: stop flag %d\n", rank, iter,
                   done);
            err = 1;
            break;
        }
        if (done && !bad && (now() - t0 < duration - 1.0)) {
            printf("MPI_ERROR rank=%d iter=%ld: stopped after %.1f s of %.1f\n",
                   rank, iter, now() - t0, duration);
            err = 1;
            break;
        }
        if ((rank == 0) && (now() > next_report)) {
            printf("MPI_PROGRESS t=%.1f iter=%ld\n", now() - t0, iter);
            fflush(stdout);
            next_report += 1;
        }
    }

    /* a rank that failed says so itself: the other may be stuck */
    if ((rank == 0) || err) {
        printf("MPI_RESULT %s iterations=%ld bytes=%ld rank=%d\n",
               err ? "error" : (bad ? "mismatch" : "ok"), iter, bytes, rank);
    }
    fflush(stdout);
    quiet_barrier(rank, nranks, bad || err);
    if (check(MPI_Finalize(), "MPI_Finalize", rank, iter)) {
        err = 1;
    }
    return bad || err;
}
