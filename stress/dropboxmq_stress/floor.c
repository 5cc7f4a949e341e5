/* dropboxmq bench floor: the protocol's file operations with no library (stress/bench.py
   compiles it at run time: gcc -O2; usage at the end). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE 1
#endif
#define PATHMAX 4096

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
static void die(const char *what, const char *path) { fprintf(stderr, "%s %s: %s\n", what, path, strerror(errno)); exit(2); }
static int mv(const char *a, const char *b) {
    if (renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_NOREPLACE) == 0) return 0;
    if (errno != EINVAL && errno != ENOSYS) return -1;
    if (link(a, b) != 0) return -1;
    return unlink(a);
}
static void fsync_dir(const char *path) {
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0) die("fsync", path);
    close(fd);
}
static int cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }
/* one listing of dir (dot-files skipped), sorted; *n = how many */
static char **list_sorted(const char *dir, long cap, long *n) {
    DIR *d = opendir(dir); if (!d) die("opendir", dir);
    long nn = 0; char **names = malloc(cap * sizeof *names);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        if (nn == cap) { cap *= 2; names = realloc(names, cap * sizeof *names); }
        names[nn++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, nn, sizeof *names, cmp);
    *n = nn;
    return names;
}

/* fill DIR START COUNT SIZE PREFIX SUFFIX: COUNT files PREFIX<START+i>-<10 digits>SUFFIX in DIR */
static int fill(char **av) {
    const char *dir = av[0]; unsigned long long start = strtoull(av[1], 0, 10); long n = atol(av[2]);
    size_t size = (size_t)atol(av[3]); const char *prefix = av[4], *suffix = av[5];
    char *body = calloc(1, size + 1); memset(body, 'x', size);
    char path[PATHMAX];
    for (long i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/%s%llu-%010ld%s", dir, prefix, start + i, (i * 7919L) % 10000000000L, suffix);
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0) die("create", path);
        if (size && write(fd, body, size) != (ssize_t)size) die("write", path);
        close(fd);
    }
    return 0;
}

static void name_of(char *out, const char *dir, long stamp, long i) {
    snprintf(out, PATHMAX, "%s/4.%ld%06ld-%010ld.T", dir, stamp, i, (i * 7919L) % 10000000000L);
}

/* cycle BASE LIMIT SIZE MODE BUDGET: MODE 0 nosync, 1 fsync, 2 group100 (send only),
   3 fsync the file only (send only), 4 syncfs100 (send only: the reference's group commit,
   100 files written, one syncfs, 100 renames, target/ fsynced once).
   prints: sent send_seconds received receive_seconds */
static int cycle(char **av) {
    const char *base = av[0]; long limit = atol(av[1]); size_t size = (size_t)atol(av[2]);
    int mode = atoi(av[3]); double budget = atof(av[4]);
    static char work[PATHMAX], target[PATHMAX], proc[PATHMAX], done[PATHMAX], a[PATHMAX], b[PATHMAX];
    snprintf(work, sizeof work, "%s/working", base); snprintf(target, sizeof target, "%s/target", base);
    snprintf(proc, sizeof proc, "%s/processing", base); snprintf(done, sizeof done, "%s/processed", base);
    char *body = calloc(1, size + 1); memset(body, 'x', size);
    char *buf = malloc(size + 65536);
    long stamp = (long)time(0) * 1000L, sent = 0, got = 0;
    int batch = mode == 2 || mode == 4 ? 100 : 1;
    double t0 = now(), deadline = t0 + budget;
    while (sent < limit && now() < deadline) {
        for (int k = 0; k < batch; k++) {
            name_of(a, work, stamp, sent + k);
            int fd = open(a, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
            if (fd < 0) die("create", a);
            if (size && write(fd, body, size) != (ssize_t)size) die("write", a);
            if ((mode == 1 || mode == 2 || mode == 3) && fsync(fd) != 0) die("fsync", a);
            if (mode == 4 && k == batch - 1 && syncfs(fd) != 0) die("syncfs", a);
            close(fd);
        }
        for (int k = 0; k < batch; k++) {
            name_of(a, work, stamp, sent + k); name_of(b, target, stamp, sent + k);
            if (mv(a, b) != 0) die("rename", a);
        }
        if (mode == 1 || mode == 2 || mode == 4) fsync_dir(target);
        sent += batch;
    }
    double t1 = now();
    if (mode >= 2) { printf("%ld %.9f 0 0\n", sent, t1 - t0); return 0; }
    double r0 = now();
    long nn; char **names = list_sorted(target, sent + 16, &nn);
    for (long i = 0; i < nn && got < sent; i++) {
        snprintf(a, sizeof a, "%s/%.200s", target, names[i]);
        snprintf(b, sizeof b, "%s/c0000000001~%.200s", proc, names[i]);
        if (mv(a, b) != 0) continue; /* lost race */
        int fd = open(b, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0) die("open", b);
        if (read(fd, buf, size + 65536) < 0) die("read", b);
        close(fd);
        snprintf(a, sizeof a, "%s/c0000000001~%.200s", done, names[i]);
        if (mv(b, a) != 0) die("rename", b);
        if (mode) fsync_dir(done);
        got++;
    }
    printf("%ld %.9f %ld %.9f\n", sent, t1 - t0, got, now() - r0);
    return 0;
}

/* claim BASE SEED: one competing consumer draining BASE/target (start at a random place,
   wrap around, skip lost races); prints: claimed start_monotonic end_monotonic */
static int claim(char **av) {
    const char *base = av[0]; unsigned seed = (unsigned)atol(av[1]);
    static char target[PATHMAX], proc[PATHMAX], done[PATHMAX], a[PATHMAX], b[PATHMAX], buf[65536];
    snprintf(target, sizeof target, "%s/target", base); snprintf(proc, sizeof proc, "%s/processing", base);
    snprintf(done, sizeof done, "%s/processed", base);
    double t0 = now();
    long got = 0;
    for (;;) {
        long nn; char **names = list_sorted(target, 1024, &nn);
        if (!nn) break;
        long start = (long)(rand_r(&seed) % (unsigned)nn);
        for (long j = 0; j < nn; j++) {
            const char *n = names[(start + j) % nn];
            snprintf(a, sizeof a, "%s/%.200s", target, n);
            snprintf(b, sizeof b, "%s/c%u~%.200s", proc, seed, n);
            if (mv(a, b) != 0) continue; /* lost race */
            int fd = open(b, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
            if (fd < 0) die("open", b);
            if (read(fd, buf, sizeof buf) < 0) die("read", b);
            close(fd);
            snprintf(a, sizeof a, "%s/c%u~%.200s", done, seed, n);
            if (mv(b, a) != 0) die("rename", b);
            got++;
        }
        for (long j = 0; j < nn; j++) free(names[j]);
        free(names);
    }
    printf("%ld %.9f %.9f\n", got, t0, now());
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "claim")) return claim(argv + 2);
    if (argc == 8 && !strcmp(argv[1], "fill")) return fill(argv + 2);
    if (argc == 7 && !strcmp(argv[1], "cycle")) return cycle(argv + 2);
    fprintf(stderr, "usage: floor fill DIR START COUNT SIZE PREFIX SUFFIX | floor cycle BASE LIMIT SIZE MODE BUDGET\n");
    return 1;
}
