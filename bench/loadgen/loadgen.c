/* The sample keyspace's traffic, written fast enough to find a stream's ceiling.
 *
 * The same tables, columns and statement mix as `updatestream devcluster traffic`: random
 * inserts, updates and deletes of `users`, `orders` and `events` in transactions of 1 to
 * --max-tx-rows rows, each row on the shard its primary vindex (`hash`, `xxhash`) puts it in.
 * Several writers per shard (--connections), each a thread with one connection, are the only
 * writers of the rows they made: a writer updates and deletes only its own rows, so the changes
 * to one row are committed, and recorded, in order. A transaction is one round trip: its
 * statements and COMMIT in one multi-statement query; the transaction's GTID comes back in
 * COMMIT's OK packet (`session_track_system_variables = last_gtid`).
 *
 * Every committed row change is one line of the ledger (--ledger), the format
 * `updatestream verify` and `updatestream devcluster check` read, with the writer's own clock
 * right after COMMIT returned (`commit_time`). At the end one JSON object of figures goes to
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
#include <time.h>

#include "buf.h"
#include "ledger.h"
#include "sample.h"
#include "vindex.h"

#define MAX_SHARDS 64
#define MAX_TX_ROWS 1000

typedef struct {
    char name[64];
    char host[256];
    unsigned port;
    key_range_t range;
} shard_t;

typedef struct {
    double rate, duration;
    uint64_t seed, first_id;
    int max_tx_rows, connections, progress;
    double weights[3];
    const char *database, *ledger_path;
    uint64_t first_order, first_tx;
    char user[256], password[256];
    shard_t shards[MAX_SHARDS];
    int shard_count;
} options_t;

typedef struct {
    int index;
    const shard_t *shard;
    generator_t gen;
    MYSQL *conn;
    double rate;
    uint64_t transactions, rows, by_op[3];
    double first_commit, last_commit;
    char error[1024];
    buf_t sql, middles, scratch;
    change_t *changes;
} worker_t;

static options_t opts;
static ledger_t ledger;
static volatile sig_atomic_t stopping = 0;
static const EVP_MD *sha256;

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

/* -- one transaction ------------------------------------------------------------------------ */

static int same_row(const change_t *a, const change_t *b) {
    return a->table == b->table && a->op != OP_INSERT && b->op != OP_INSERT && a->index == b->index;
}

/* Like the Python generator: a size, a first change, then candidates for distinct rows. */
static size_t make_transaction(worker_t *w) {
    size_t size = 1 + (size_t)rng_below(&w->gen.rng, (uint64_t)opts.max_tx_rows);
    size_t count = 0;
    generator_change(&w->gen, &w->changes[count++]);
    for (size_t attempt = 0; attempt < size * 4 && count < size; attempt++) {
        change_t *candidate = &w->changes[count];
        generator_change(&w->gen, candidate);
        int repeated = 0;
        for (size_t i = 0; i < count && !repeated; i++) repeated = same_row(candidate, &w->changes[i]);
        if (!repeated) count++;
    }
    return count;
}

/* The ledger fields of one change from "table" to "keyspace_id", NUL-terminated. */
static void render_middle(worker_t *w, const change_t *c) {
    buf_t *m = &w->middles, *s = &w->scratch;
    buf_printf(m, "\"table\":\"%s\",\"pk\":", TABLE_NAMES[c->table]);
    buf_reset(s);
    row_pk_json(c->table, &c->image, s);
    buf_json_string(m, s->data, s->len);
    buf_printf(m, ",\"op\":\"%s\",\"digest\":", OP_NAMES[c->op]);
    if (c->op == OP_DELETE) {
        buf_puts(m, "null");
    } else {
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned int md_len = 0;
        buf_reset(s);
        row_image_json(c->table, &c->image, s);
        EVP_Digest(s->data, s->len, md, &md_len, sha256, NULL);
        buf_putc(m, '"');
        buf_hex(m, md, md_len);
        buf_putc(m, '"');
    }
    unsigned char ksid[KSID_LEN];
    row_ksid(c->table, &c->image, ksid);
    buf_printf(m, ",\"shard\":\"%s\",\"keyspace_id\":\"", w->shard->name);
    buf_hex(m, ksid, KSID_LEN);
    buf_putc(m, '"');
    buf_putc(m, '\0');
}

/* Write the gathered inserts of each table as one multi-row INSERT. */
static void flush_inserts(worker_t *w, size_t pending[T_COUNT][MAX_TX_ROWS], size_t sizes[T_COUNT],
                          long expected[], int *statements) {
    for (int t = 0; t < T_COUNT; t++) {
        if (!sizes[t]) continue;
        sql_insert_head((table_id)t, &w->sql);
        for (size_t j = 0; j < sizes[t]; j++) {
            if (j) buf_puts(&w->sql, ", ");
            sql_values(w->conn, (table_id)t, &w->changes[pending[t][j]].image, &w->sql);
        }
        buf_putc(&w->sql, ';');
        expected[(*statements)++] = (long)sizes[t];
        sizes[t] = 0;
    }
}

/* The statements: inserts gathered per table and written before the next update or delete
 * (as the Python generator does); returns how many, with the rows each must change. */
static int build_sql(worker_t *w, size_t count, long expected[]) {
    static __thread size_t pending[T_COUNT][MAX_TX_ROWS];
    size_t sizes[T_COUNT] = {0};
    int statements = 0;
    buf_reset(&w->sql);
    for (size_t i = 0; i < count; i++) {
        change_t *c = &w->changes[i];
        if (c->op == OP_INSERT) {
            pending[c->table][sizes[c->table]++] = i;
            continue;
        }
        flush_inserts(w, pending, sizes, expected, &statements);
        if (c->op == OP_UPDATE) sql_update(w->conn, c, &w->sql);
        else sql_delete(w->conn, c->table, &c->image, &w->sql);
        buf_putc(&w->sql, ';');
        expected[statements++] = 1;
    }
    flush_inserts(w, pending, sizes, expected, &statements);
    buf_puts(&w->sql, "COMMIT");
    return statements;
}

static int fail(worker_t *w, const char *what) {
    snprintf(w->error, sizeof w->error, "shard %s (%s:%u), %s: %s", w->shard->name,
             w->shard->host, w->shard->port, what, mysql_error(w->conn));
    return -1;
}

/* The GTID COMMIT's OK packet reports: the tracked `last_gtid` (name, then value). */
static void committed_gtid(MYSQL *conn, char *gtid, size_t size) {
    const char *data;
    size_t length;
    if (mysql_session_track_get_first(conn, SESSION_TRACK_SYSTEM_VARIABLES, &data, &length) != 0)
        return;
    do {
        int is_name = length == 9 && memcmp(data, "last_gtid", 9) == 0;
        if (mysql_session_track_get_next(conn, SESSION_TRACK_SYSTEM_VARIABLES, &data, &length) != 0)
            return;
        if (is_name && length < size) {
            memcpy(gtid, data, length);
            gtid[length] = '\0';
            return;
        }
    } while (mysql_session_track_get_next(conn, SESSION_TRACK_SYSTEM_VARIABLES, &data, &length) == 0);
}

/* Send the transaction in one round trip; fills the GTID and the commit clock. */
static int run_transaction(worker_t *w, int statements, const long expected[], char *gtid,
                           size_t gtid_size, double *committed_at) {
    if (mysql_real_query(w->conn, w->sql.data, (unsigned long)w->sql.len) != 0) {
        fail(w, "query");
        mysql_query(w->conn, "ROLLBACK");
        return -1;
    }
    int index = 0, status = 0, mismatch = 0;
    gtid[0] = '\0';
    do {
        if (mysql_field_count(w->conn) != 0) return fail(w, "an unexpected result set");
        if (index < statements && (long)mysql_affected_rows(w->conn) != expected[index]) {
            mismatch = 1;
        } else if (index == statements) {
            *committed_at = wall_s();
            committed_gtid(w->conn, gtid, gtid_size);
        }
        index++;
        status = mysql_next_result(w->conn);
    } while (status == 0);
    if (status > 0) {
        fail(w, "statement");
        mysql_query(w->conn, "ROLLBACK");
        return -1;
    }
    if (mismatch) {
        /* one round trip: the COMMIT ran; the run ends with an error and this transaction is
         * not in the ledger, so a check of the shards shows it */
        snprintf(w->error, sizeof w->error,
                 "shard %s: an update or delete matched no row; is another writer changing "
                 "the sample tables?", w->shard->name);
        return -1;
    }
    if (gtid[0] == '\0') {
        snprintf(w->error, sizeof w->error,
                 "shard %s: COMMIT's OK packet did not report last_gtid (session tracking)",
                 w->shard->name);
        return -1;
    }
    return 0;
}

static int commit(worker_t *w, size_t count) {
    long expected[MAX_TX_ROWS + T_COUNT];
    char gtid[256];
    double committed_at = 0;
    buf_reset(&w->middles);
    for (size_t i = 0; i < count; i++) render_middle(w, &w->changes[i]);
    int statements = build_sql(w, count, expected);
    if (run_transaction(w, statements, expected, gtid, sizeof gtid, &committed_at) != 0) return -1;
    ledger_write_tx(&ledger, w->middles.data, count, gtid, committed_at);
    for (size_t i = 0; i < count; i++) w->by_op[w->changes[i].op]++;
    generator_apply(&w->gen, w->changes, count);
    if (w->transactions == 0) w->first_commit = committed_at;
    w->last_commit = committed_at;
    w->transactions++;
    w->rows += count;
    return 0;
}

/* -- a writer ------------------------------------------------------------------------------- */

static int connect_shard(worker_t *w) {
    w->conn = mysql_init(NULL);
    if (w->conn == NULL) {
        snprintf(w->error, sizeof w->error, "out of memory for a connection");
        return -1;
    }
    unsigned timeout = 10;
    mysql_options(w->conn, MYSQL_SET_CHARSET_NAME, "utf8mb4");
    mysql_options(w->conn, MYSQL_OPT_CONNECT_TIMEOUT, &timeout);
    if (mysql_real_connect(w->conn, w->shard->host, opts.user, opts.password, opts.database,
                           w->shard->port, NULL, CLIENT_MULTI_STATEMENTS | CLIENT_FOUND_ROWS) == NULL)
        return fail(w, "connect");
    if (mysql_query(w->conn, "SET autocommit = 0, session_track_system_variables = 'last_gtid'"))
        return fail(w, "SET autocommit and session tracking");
    return 0;
}

static void pace(worker_t *w, double *due, size_t rows) {
    if (w->rate <= 0) return;
    double now = monotonic_s();
    *due = (*due > now - 1.0 ? *due : now - 1.0) + (double)rows / w->rate;
    while (!stopping) {
        double delay = *due - monotonic_s();
        if (delay <= 0) return;
        if (delay > 0.05) delay = 0.05; /* wake up for a stop */
        struct timespec ts = {(time_t)delay, (long)((delay - (time_t)delay) * 1e9)};
        nanosleep(&ts, NULL);
    }
}

static void *run_writer(void *arg) {
    worker_t *w = arg;
    if (connect_shard(w) != 0) {
        stopping = 1;
        return NULL;
    }
    double began = monotonic_s(), due = began;
    while (!stopping) {
        if (opts.duration > 0 && monotonic_s() - began >= opts.duration) break;
        size_t count = make_transaction(w);
        if (commit(w, count) != 0) {
            stopping = 1; /* one failed writer ends the run: its figures would be wrong */
            break;
        }
        pace(w, &due, count);
    }
    mysql_close(w->conn);
    return NULL;
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
        {0, 0, 0, 0},
    };
    int keyspace_ids = 0, c;
    opts = (options_t){.max_tx_rows = 5, .connections = 4, .weights = {0.5, 0.35, 0.15},
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
            case 'k': keyspace_ids = 1; break;
            default: usage_error("unknown option (see the comment at the top of loadgen.c)");
        }
    }
    if (keyspace_ids) return 1;
    if (opts.shard_count == 0) usage_error("name at least one --shard");
    if (opts.max_tx_rows < 1 || opts.max_tx_rows > MAX_TX_ROWS)
        usage_error("--max-tx-rows must be 1..1000");
    if (opts.connections < 1 || opts.connections > 64) usage_error("--connections must be 1..64");
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

static void print_figures(worker_t *workers, int count, double seconds, const char *error) {
    uint64_t rows = 0, transactions = 0, by_op[3] = {0};
    double first = 0, last = 0;
    printf("{\"rows\":");
    for (int i = 0; i < count; i++) {
        worker_t *w = &workers[i];
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
            if (workers[i].shard == &opts.shards[s]) shard_rows += workers[i].rows;
        printf("%s\"%s\":%llu", s ? "," : "", opts.shards[s].name, (unsigned long long)shard_rows);
    }
    printf("},\"writers\":%d,\"seconds\":%.3f,\"first_commit\":%.6f,\"last_commit\":%.6f,"
           "\"error\":", count, seconds, first, last);
    buf_t text;
    buf_init(&text, 256);
    if (error) buf_json_string(&text, error, strlen(error));
    else buf_puts(&text, "null");
    printf("%s}\n", text.data);
    buf_free(&text);
}

static void report_progress(worker_t *workers, int count, double began) {
    uint64_t rows = 0;
    for (int i = 0; i < count; i++) rows += __atomic_load_n(&workers[i].rows, __ATOMIC_RELAXED);
    fprintf(stderr, "[%6.1fs] rows=%llu\n", monotonic_s() - began, (unsigned long long)rows);
}

int main(int argc, char **argv) {
    vindex_init();
    if (parse_options(argc, argv)) return print_keyspace_ids();
    sha256 = EVP_MD_fetch(NULL, "SHA256", NULL);
    if (sha256 == NULL || mysql_library_init(0, NULL, NULL) != 0) usage_error("cannot initialise");
    if (ledger_open(&ledger, opts.ledger_path, opts.first_order, opts.first_tx) != 0) {
        fprintf(stderr, "loadgen: cannot open the ledger %s: %s\n", opts.ledger_path, strerror(errno));
        return 66;
    }
    struct sigaction action = {.sa_handler = on_signal};
    sigaction(SIGTERM, &action, NULL);
    sigaction(SIGINT, &action, NULL);
    if (opts.first_id == 0) /* like the Python generator: ids from the clock, apart per run */
        opts.first_id = (uint64_t)(wall_s() * 1000) % 1000000000ULL * 1000;
    int count = opts.shard_count * opts.connections;
    worker_t *workers = calloc((size_t)count, sizeof(worker_t));
    pthread_t *threads = calloc((size_t)count, sizeof(pthread_t));
    for (int i = 0; i < count; i++) {
        worker_t *w = &workers[i];
        w->index = i;
        w->shard = &opts.shards[i % opts.shard_count];
        w->rate = opts.rate / count;
        generator_init(&w->gen, opts.seed * 1000003ULL + (uint64_t)i + 1, opts.first_id + (uint64_t)i,
                       (uint64_t)count, &w->shard->range, opts.weights);
        buf_init(&w->sql, 8192);
        buf_init(&w->middles, 4096);
        buf_init(&w->scratch, 1024);
        w->changes = calloc((size_t)opts.max_tx_rows, sizeof(change_t));
    }
    pthread_t watcher;
    pthread_create(&watcher, NULL, watch_stdin, NULL);
    pthread_detach(watcher);
    double began = monotonic_s();
    for (int i = 0; i < count; i++) pthread_create(&threads[i], NULL, run_writer, &workers[i]);
    if (opts.progress) {
        while (!stopping && (opts.duration <= 0 || monotonic_s() - began < opts.duration)) {
            struct timespec second = {1, 0};
            nanosleep(&second, NULL);
            report_progress(workers, count, began);
        }
    }
    for (int i = 0; i < count; i++) pthread_join(threads[i], NULL);
    double seconds = monotonic_s() - began;
    const char *error = NULL;
    for (int i = 0; i < count && error == NULL; i++)
        if (workers[i].error[0]) error = workers[i].error;
    int closed = ledger_close(&ledger);
    print_figures(workers, count, seconds, error);
    for (int i = 0; i < count; i++) {
        generator_free(&workers[i].gen);
        buf_free(&workers[i].sql);
        buf_free(&workers[i].middles);
        buf_free(&workers[i].scratch);
        free(workers[i].changes);
    }
    free(workers);
    free(threads);
    mysql_library_end();
    return error != NULL || closed != 0 ? 1 : 0;
}
