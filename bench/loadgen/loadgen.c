/* The sample keyspace's traffic, written fast enough to find a stream's ceiling.
 *
 * The same tables, columns and statement mix as `updatestream devcluster traffic`: random
 * inserts, updates and deletes of `users`, `orders` and `events` in transactions of 1 to
 * --max-tx-rows rows, each row on the shard its primary vindex (`hash`, `xxhash`) puts it in.
 * Several writers per shard (--connections), each a thread with one connection, are the only
 * writers of the rows they made: a writer updates and deletes only its own rows, so the changes
 * to one row are committed, and recorded, in order. A round trip carries --pipeline
 * transactions, each its statements and its COMMIT, in one multi-statement query; each
 * transaction's GTID comes back in its COMMIT's OK packet (`session_track_system_variables =
 * last_gtid`), and its commit clock is read as that packet is read (the server may send the OK
 * packets of one round trip together: a clock is then late by at most the round trip's later
 * transactions).
 *
 * Every committed row change is one line of the ledger (--ledger), the format
 * `updatestream verify` and `updatestream devcluster check` read, with the writer's own clock
 * right after COMMIT returned (`commit_time`). `order` and `tx` number the changes in the order
 * writers record their commits: per row that is commit order (one writer owns a row); between
 * two writers of a shard it may differ from the GTIDs' for transactions in flight at once. At the end one JSON object of figures goes to
 * stdout.
 *
 * Input: the account's user name and password as the first two lines of stdin (never on the
 * command line). The end of stdin stops the run (after each writer's current transaction), as
 * SIGTERM and SIGINT do, so a parent that goes away leaves no writer behind. --keyspace-ids instead reads `<table> <vindex column value>` lines and prints
 * each row's keyspace id in hex (for tests against the Python vindexes). */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <mysql.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "buf.h"
#include "ledger.h"
#include "sample.h"
#include "vindex.h"
#include "writer.h"

#define MAX_SHARDS 64

typedef struct {
    double rate, duration;
    uint64_t seed, first_id;
    int max_tx_rows, connections, pipeline, progress;
    double weights[3];
    const char *database, *ledger_path;
    uint64_t first_order, first_tx;
    char user[256], password[256];
    shard_t shards[MAX_SHARDS];
    int shard_count;
} options_t;

static options_t opts;
static ledger_t ledger;
static volatile sig_atomic_t stopping = 0;

static double wall_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static double monotonic_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void on_signal(int signo) {
    (void)signo;
    stopping = 1;
}

/* -- options -------------------------------------------------------------------------------- */

static void usage_error(const char *message) {
    fprintf(stderr, "loadgen: %s\n", message);
    exit(64);
}

/* --shard NAME=HOST:PORT: the shard's name is its key range. */
static void parse_shard(const char *text) {
    if (opts.shard_count == MAX_SHARDS) usage_error("too many --shard options");
    shard_t *shard = &opts.shards[opts.shard_count++];
    const char *eq = strchr(text, '='), *colon = strrchr(text, ':');
    if (eq == NULL || colon == NULL || colon < eq || (size_t)(eq - text) >= sizeof shard->name ||
        (size_t)(colon - eq - 1) >= sizeof shard->host)
        usage_error("--shard takes NAME=HOST:PORT, like -80=127.0.0.1:33061");
    memcpy(shard->name, text, (size_t)(eq - text));
    memcpy(shard->host, eq + 1, (size_t)(colon - eq - 1));
    shard->port = (unsigned)strtoul(colon + 1, NULL, 10);
    if (key_range_parse(shard->name, &shard->range) != 0)
        usage_error("a --shard name must be a key range, like -80, 40-80 or 80-");
}

static void read_line(char *out, size_t size, const char *what) {
    if (fgets(out, (int)size, stdin) == NULL) {
        fprintf(stderr, "loadgen: expected the %s on stdin\n", what);
        exit(64);
    }
    out[strcspn(out, "\r\n")] = '\0';
}

static int parse_options(int argc, char **argv) {
    static const struct option long_options[] = {
        {"shard", required_argument, 0, 's'}, {"rate", required_argument, 0, 'r'},
        {"duration", required_argument, 0, 'd'}, {"seed", required_argument, 0, 'S'},
        {"max-tx-rows", required_argument, 0, 'm'}, {"connections", required_argument, 0, 'c'},
        {"weights", required_argument, 0, 'w'}, {"database", required_argument, 0, 'D'},
        {"ledger", required_argument, 0, 'l'}, {"first-order", required_argument, 0, 'o'},
        {"first-tx", required_argument, 0, 't'}, {"first-id", required_argument, 0, 'i'},
        {"progress", no_argument, 0, 'p'}, {"keyspace-ids", no_argument, 0, 'k'},
        {"pipeline", required_argument, 0, 'P'},
        {0, 0, 0, 0},
    };
    int keyspace_ids = 0, c;
    opts = (options_t){.max_tx_rows = 5, .connections = 4, .pipeline = 1,
                       .weights = {0.5, 0.35, 0.15},
                       .database = "commerce", .first_order = 1, .first_tx = 1};
    while ((c = getopt_long(argc, argv, "", long_options, NULL)) != -1) {
        switch (c) {
            case 's': parse_shard(optarg); break;
            case 'r': opts.rate = strtod(optarg, NULL); break;
            case 'd': opts.duration = strtod(optarg, NULL); break;
            case 'S': opts.seed = strtoull(optarg, NULL, 10); break;
            case 'm': opts.max_tx_rows = atoi(optarg); break;
            case 'c': opts.connections = atoi(optarg); break;
            case 'w':
                if (sscanf(optarg, "%lf,%lf,%lf", &opts.weights[0], &opts.weights[1],
                           &opts.weights[2]) != 3)
                    usage_error("--weights takes INSERT,UPDATE,DELETE, like 0.5,0.35,0.15");
                break;
            case 'D': opts.database = optarg; break;
            case 'l': opts.ledger_path = optarg; break;
            case 'o': opts.first_order = strtoull(optarg, NULL, 10); break;
            case 't': opts.first_tx = strtoull(optarg, NULL, 10); break;
            case 'i': opts.first_id = strtoull(optarg, NULL, 10); break;
            case 'p': opts.progress = 1; break;
            case 'P': opts.pipeline = atoi(optarg); break;
            case 'k': keyspace_ids = 1; break;
            default: usage_error("unknown option (see the comment at the top of loadgen.c)");
        }
    }
    if (keyspace_ids) return 1;
    if (opts.shard_count == 0) usage_error("name at least one --shard");
    if (opts.max_tx_rows < 1 || opts.max_tx_rows > MAX_TX_ROWS)
        usage_error("--max-tx-rows must be 1..1000");
    if (opts.connections < 1 || opts.connections > 64) usage_error("--connections must be 1..64");
    if (opts.pipeline < 1 || opts.pipeline > MAX_PIPELINE)
        usage_error("--pipeline (transactions per round trip) must be 1..16");
    if (opts.weights[0] <= 0 || opts.weights[1] < 0 || opts.weights[2] < 0)
        usage_error("--weights: inserts must have a positive weight, the others none below 0");
    read_line(opts.user, sizeof opts.user, "user name");
    read_line(opts.password, sizeof opts.password, "password");
    return 0;
}

/* `<table> <value>` lines -> the keyspace id in hex, one line each. */
static int print_keyspace_ids(void) {
    char line[512];
    while (fgets(line, sizeof line, stdin) != NULL) {
        line[strcspn(line, "\r\n")] = '\0';
        char *space = strchr(line, ' ');
        if (space == NULL) usage_error("--keyspace-ids reads lines of <table> <value>");
        *space = '\0';
        unsigned char ksid[KSID_LEN];
        if (strcmp(line, "events") == 0) xxhash_ksid(space + 1, strlen(space + 1), ksid);
        else hash_ksid(strtoull(space + 1, NULL, 10), ksid);
        for (int i = 0; i < KSID_LEN; i++) printf("%02x", ksid[i]);
        putchar('\n');
    }
    return 0;
}

/* The end of stdin (the parent closed it, or went away) stops the run. */
static void *watch_stdin(void *arg) {
    (void)arg;
    char chunk[256];
    while (fgets(chunk, sizeof chunk, stdin) != NULL) {
    }
    stopping = 1;
    return NULL;
}

/* -- figures -------------------------------------------------------------------------------- */

static void print_figures(writer_t *writers, int count, double seconds, const char *error) {
    uint64_t rows = 0, transactions = 0, by_op[3] = {0};
    double first = 0, last = 0;
    printf("{\"rows\":");
    for (int i = 0; i < count; i++) {
        writer_t *w = &writers[i];
        rows += w->rows;
        transactions += w->transactions;
        for (int op = 0; op < 3; op++) by_op[op] += w->by_op[op];
        if (w->transactions && (first == 0 || w->first_commit < first)) first = w->first_commit;
        if (w->last_commit > last) last = w->last_commit;
    }
    printf("%llu,\"transactions\":%llu,\"by_op\":{\"insert\":%llu,\"update\":%llu,"
           "\"delete\":%llu},\"by_shard\":{", (unsigned long long)rows,
           (unsigned long long)transactions, (unsigned long long)by_op[0],
           (unsigned long long)by_op[1], (unsigned long long)by_op[2]);
    for (int s = 0; s < opts.shard_count; s++) {
        uint64_t shard_rows = 0;
        for (int i = 0; i < count; i++)
            if (writers[i].shard == &opts.shards[s]) shard_rows += writers[i].rows;
        printf("%s\"%s\":%llu", s ? "," : "", opts.shards[s].name, (unsigned long long)shard_rows);
    }
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    double cpu = (double)usage.ru_utime.tv_sec + usage.ru_utime.tv_usec / 1e6 +
                 (double)usage.ru_stime.tv_sec + usage.ru_stime.tv_usec / 1e6;
    printf("},\"writers\":%d,\"seconds\":%.3f,\"cpu_s\":%.3f,\"first_commit\":%.6f,"
           "\"last_commit\":%.6f,\"error\":", count, seconds, cpu, first, last);
    buf_t text;
    buf_init(&text, 256);
    if (error) buf_json_string(&text, error, strlen(error));
    else buf_puts(&text, "null");
    printf("%s}\n", text.data);
    buf_free(&text);
}

static void report_progress(writer_t *writers, int count, double began) {
    uint64_t rows = 0;
    for (int i = 0; i < count; i++) rows += __atomic_load_n(&writers[i].rows, __ATOMIC_RELAXED);
    fprintf(stderr, "[%6.1fs] rows=%llu\n", monotonic_s() - began, (unsigned long long)rows);
}

/* The writers, `--connections` per shard, each with its own ids, random numbers and rows. */
static writer_t *make_writers(int count, const writer_config_t *config) {
    writer_t *writers = calloc((size_t)count, sizeof(writer_t));
    if (writers == NULL) usage_error("out of memory for the writers");
    for (int i = 0; i < count; i++) {
        writer_t *w = &writers[i];
        w->config = config;
        w->shard = &opts.shards[i % opts.shard_count];
        w->rate = opts.rate / count;
        generator_init(&w->gen, opts.seed * 1000003ULL + (uint64_t)i + 1,
                       opts.first_id + (uint64_t)i, (uint64_t)count, &w->shard->range,
                       opts.weights);
        buf_init(&w->sql, 8192);
        buf_init(&w->middles, 4096);
        buf_init(&w->scratch, 1024);
        w->changes = calloc((size_t)opts.max_tx_rows, sizeof(change_t));
    }
    return writers;
}

static void free_writers(writer_t *writers, int count) {
    for (int i = 0; i < count; i++) {
        generator_free(&writers[i].gen);
        buf_free(&writers[i].sql);
        buf_free(&writers[i].middles);
        buf_free(&writers[i].scratch);
        free(writers[i].changes);
    }
    free(writers);
}

int main(int argc, char **argv) {
    vindex_init();
    if (parse_options(argc, argv)) return print_keyspace_ids();
    const EVP_MD *sha256 = EVP_MD_fetch(NULL, "SHA256", NULL);
    if (sha256 == NULL || mysql_library_init(0, NULL, NULL) != 0) usage_error("cannot initialise");
    if (ledger_open(&ledger, opts.ledger_path, opts.first_order, opts.first_tx) != 0) {
        fprintf(stderr, "loadgen: cannot open the ledger %s: %s\n", opts.ledger_path,
                strerror(errno));
        return 66;
    }
    struct sigaction action = {.sa_handler = on_signal};
    sigaction(SIGTERM, &action, NULL);
    sigaction(SIGINT, &action, NULL);
    if (opts.first_id == 0) /* like the Python generator: ids from the clock, apart per run */
        opts.first_id = (uint64_t)(wall_s() * 1000) % 1000000000ULL * 1000;
    writer_config_t config = {
        .database = opts.database, .user = opts.user, .password = opts.password,
        .max_tx_rows = opts.max_tx_rows, .pipeline = opts.pipeline, .duration = opts.duration,
        .sha256 = sha256, .ledger = &ledger, .stopping = &stopping,
    };
    int count = opts.shard_count * opts.connections;
    writer_t *writers = make_writers(count, &config);
    pthread_t *threads = calloc((size_t)count, sizeof(pthread_t));
    pthread_t watcher;
    pthread_create(&watcher, NULL, watch_stdin, NULL);
    pthread_detach(watcher);
    double began = monotonic_s();
    for (int i = 0; i < count; i++) pthread_create(&threads[i], NULL, run_writer, &writers[i]);
    while (opts.progress && !stopping &&
           (opts.duration <= 0 || monotonic_s() - began < opts.duration)) {
        struct timespec second = {1, 0};
        nanosleep(&second, NULL);
        report_progress(writers, count, began);
    }
    for (int i = 0; i < count; i++) pthread_join(threads[i], NULL);
    double seconds = monotonic_s() - began;
    const char *error = NULL;
    for (int i = 0; i < count && error == NULL; i++)
        if (writers[i].error[0]) error = writers[i].error;
    int closed = ledger_close(&ledger);
    print_figures(writers, count, seconds, error);
    free_writers(writers, count);
    free(threads);
    mysql_library_end();
    return error != NULL || closed != 0 ? 1 : 0;
}
