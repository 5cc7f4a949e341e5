/* A fast DropboxMQ consumer in C, written from spec/PROTOCOL.md alone.
 *
 *   fast_consumer ROOT QUEUE CLIENT_ID
 *
 * Lists target/ (C-8: order key of N-6: priority descending, then the numeric prefix of an
 * <epochMillis><counter>-<digits> id, then the name), claims each regular file by renaming it
 * to processing/<clientId>~<name with JMSXDeliveryCountI=n+1> (C-1, C-3, N-7: the count of this
 * delivery), reads the body, prints the name as it was in target/, acknowledges by renaming to
 * processed/ (C-5).  A failed claim (ENOENT) is a lost race (C-2).  An expired message goes to
 * expired/ undelivered (C-6).  It lists target/ again after every claim (C-9) and exits after
 * a listing that yields no claim.  No recovery of its own: R-1 is left to any recoverer.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#define NAME_MAX_BYTES 255
#define MAX_ENTRIES 65536

struct entry {
    long long priority;
    int kind;                 /* 0: <digits>-<digits> id, 1: other parseable name, 2: unparseable */
    char number[32];          /* the id's numeric prefix, without leading zeros */
    char *name;
};

static int split_fields(const char *name, char fields[8][NAME_MAX_BYTES + 1]) {
    int n = 0;
    const char *start = name;
    for (const char *p = name;; p++) {
        if (*p == '.' || *p == '\0') {
            if (n == 8) return 9;
            size_t len = (size_t)(p - start);
            if (len > NAME_MAX_BYTES) len = NAME_MAX_BYTES;
            memcpy(fields[n], start, len);
            fields[n][len] = '\0';
            n++;
            start = p + 1;
            if (*p == '\0') break;
        }
    }
    return n;
}

static int all_digits(const char *s, size_t len) {
    if (len == 0) return 0;
    for (size_t i = 0; i < len; i++) if (s[i] < '0' || s[i] > '9') return 0;
    return 1;
}

static void classify(struct entry *e) {
    char f[8][NAME_MAX_BYTES + 1];
    int n = split_fields(e->name, f);
    e->priority = 4;
    e->kind = 2;
    e->number[0] = '\0';
    const char *p = f[0];
    if (n < 3 || n > 8 || f[1][0] == '\0') return;
    if (*p == '+' || *p == '-') p++;
    if (!all_digits(p, strlen(p)) || strlen(p) > 12) return;
    long long prio = strtoll(f[0], NULL, 10);
    if (prio < -2147483648LL || prio > 2147483647LL) return;
    e->priority = prio;
    e->kind = 1;
    const char *dash = strchr(f[1], '-');
    if (dash && all_digits(f[1], (size_t)(dash - f[1])) && all_digits(dash + 1, strlen(dash + 1))
        && dash - f[1] <= 30 && strlen(dash + 1) <= 30) {
        const char *d = f[1];
        while (d < dash - 1 && *d == '0') d++;
        size_t len = (size_t)(dash - d);
        memcpy(e->number, d, len);
        e->number[len] = '\0';
        e->kind = 0;
    }
}

static int numcmp(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la != lb) return la < lb ? -1 : 1;
    return strcmp(a, b);
}

static int by_order_key(const void *x, const void *y) {
    const struct entry *a = x, *b = y;
    if (a->priority != b->priority) return a->priority > b->priority ? -1 : 1;
    if (a->kind != b->kind) return a->kind < b->kind ? -1 : 1;
    if (a->kind == 0) {
        int c = numcmp(a->number, b->number);
        if (c) return c;
    }
    return strcmp(a->name, b->name);
}

/* The name with JMSXDeliveryCountI=<n+1> in its properties field (n: the count it carries). */
static int with_next_count(const char *name, char *out, size_t cap) {
    char f[8][NAME_MAX_BYTES + 1];
    int n = split_fields(name, f);
    if (n < 3 || n > 8) return snprintf(out, cap, "%s", name) < (int)cap ? 0 : -1;
    for (int i = n; i < 8; i++) f[i][0] = '\0';
    long count = 0;
    char props[NAME_MAX_BYTES + 1] = "";
    char *save = NULL;
    for (char *pair = strtok_r(f[7], "&", &save); pair; pair = strtok_r(NULL, "&", &save)) {
        if (strncmp(pair, "JMSXDeliveryCount", 17) == 0 && pair[17] && pair[18] == '=') {
            count = strtol(pair + 19, NULL, 10);
            continue;
        }
        if (props[0]) strncat(props, "&", sizeof props - strlen(props) - 1);
        strncat(props, pair, sizeof props - strlen(props) - 1);
    }
    int w = snprintf(out, cap, "%s.%s.%s.%s.%s.%s.%s.%s%sJMSXDeliveryCountI=%ld", f[0], f[1], f[2], f[3], f[4], f[5],
                     f[6], props, props[0] ? "&" : "", count + 1);
    return (w < 0 || (size_t)w >= cap || w > NAME_MAX_BYTES) ? -1 : 0;
}

static long long now_ms(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (long long)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

static int expired(const char *name) {
    char f[8][NAME_MAX_BYTES + 1];
    int n = split_fields(name, f);
    if (n < 4 || !all_digits(f[3], strlen(f[3]))) return 0;
    long long exp = strtoll(f[3], NULL, 10);
    return exp != 0 && exp <= now_ms();
}

static struct entry entries[MAX_ENTRIES];

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s ROOT QUEUE CLIENT_ID\n", argv[0]);
        return 2;
    }
    char box[4096], target[4200], src[4600], dst[4600], claimed[4600];
    snprintf(box, sizeof box, "%s/%s/incoming", argv[1], argv[2]);
    snprintf(target, sizeof target, "%s/target", box);
    const char *cid = argv[3];
    static char body[1 << 16];
    for (;;) {
        DIR *d = opendir(target);
        if (!d) { perror(target); return 1; }
        int count = 0;
        struct dirent *de;
        while ((de = readdir(d)) && count < MAX_ENTRIES) {
            if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
            entries[count].name = strdup(de->d_name);
            classify(&entries[count]);
            count++;
        }
        closedir(d);
        qsort(entries, (size_t)count, sizeof entries[0], by_order_key);
        int took = 0;
        for (int i = 0; i < count && !took; i++) {
            const char *name = entries[i].name;
            struct stat st;
            snprintf(src, sizeof src, "%s/%s", target, name);
            if (lstat(src, &st) != 0 || !S_ISREG(st.st_mode)) continue;   /* gone, or not a message file */
            if (expired(name)) {
                snprintf(dst, sizeof dst, "%s/expired/%s", box, name);
                rename(src, dst);
                continue;
            }
            char next[1024];
            char full[1100];
            if (with_next_count(name, next, sizeof next) != 0) snprintf(next, sizeof next, "%s", name);
            snprintf(full, sizeof full, "%s~%s", cid, next);
            if (strlen(full) > NAME_MAX_BYTES) snprintf(full, sizeof full, "%s", next);  /* N-9: bare */
            snprintf(claimed, sizeof claimed, "%s/processing/%s", box, full);
            if (rename(src, claimed) != 0) continue;                       /* ENOENT: lost the race */
            int fd = open(claimed, O_RDONLY | O_NOFOLLOW);
            if (fd >= 0) {
                while (read(fd, body, sizeof body) > 0) {}
                close(fd);
            }
            printf("%s\n", name);
            fflush(stdout);
            snprintf(dst, sizeof dst, "%s/processed/%s", box, full);
            if (rename(claimed, dst) != 0) { perror(claimed); return 1; }
            took = 1;                                                       /* list again (C-9) */
        }
        for (int i = 0; i < count; i++) free(entries[i].name);
        if (!took) return 0;
    }
}
