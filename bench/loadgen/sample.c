#include "sample.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *const TABLE_NAMES[T_COUNT] = {"users", "orders", "events"};
const char *const OP_NAMES[3] = {"insert", "update", "delete"};

/* The values of the Python generator (`sample_rows`), in the same order. */
static const char *const NAMES[] = {"Ada", "Grace", "Zoë", "Łukasz", "Jürgen",
                                    "Søren", "明", "Анна", "Amélie", "José"};
static const char *const SURNAMES[] = {"Lovelace", "Hopper", "Ørsted", "Müller",
                                       "García", "山田", "Иванова", "O'Brien"};
static const char *const STATUSES[] = {"active", "suspended", "closed"};
static const char *const FLAG_LABELS[] = {"admin", "beta", "vip"};      /* sorted */
static const char *const TAG_LABELS[] = {"blue", "green", "red"};       /* sorted */
static const char *const SKUS[] = {"sku-apple", "sku-pear", "sku-plum",
                                   "sku-fig", "sku-kiwi", "sku-lime"};
static const char *const KINDS[] = {"click", "view", "purchase", "signup", "logout"};
static const char *const STATES[] = {"new", "paid", "shipped", "cancelled"};
static const char *const DOC_TAGS[] = {"a", "b", "c", "d"};
/* notes of a JSON document, already as JSON string contents (ensure_ascii off) */
static const char *const DOC_NOTES[] = {"ünïcödé", "plain", "quote\\\"d", "emoji 🎉"};
static const char LEAVE[] = "leave at the door ✓ ";

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* -- random numbers (splitmix64) ------------------------------------------------------------ */

static uint64_t rng_next(rng_t *rng) {
    uint64_t z = (rng->state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

uint64_t rng_below(rng_t *rng, uint64_t bound) {
    return (uint64_t)(((unsigned __int128)rng_next(rng) * bound) >> 64);
}

static double rng_unit(rng_t *rng) { return (double)(rng_next(rng) >> 11) * 0x1.0p-53; }

static int64_t rng_between(rng_t *rng, int64_t low, int64_t high) {
    return low + (int64_t)rng_below(rng, (uint64_t)(high - low + 1));
}

static int64_t now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Each label with probability 0.4; the empty set is NULL (0), as the binlog gives it. */
static uint8_t random_set(rng_t *rng) {
    uint8_t mask = 0;
    for (int i = 0; i < 3; i++)
        if (rng_unit(rng) < 0.4) mask |= (uint8_t)(1u << i);
    return mask;
}

static json_doc_t random_doc(rng_t *rng) {
    json_doc_t doc = {0};
    if (rng_unit(rng) < 0.2) return doc;
    doc.present = 1;
    doc.score = (int16_t)rng_between(rng, 0, 1000);
    doc.tag_a = (uint8_t)rng_below(rng, 4);
    doc.tag_b = (uint8_t)rng_below(rng, 3);
    if (doc.tag_b >= doc.tag_a) doc.tag_b++;
    doc.note = rng_unit(rng) < 0.5 ? (int8_t)rng_below(rng, COUNT(DOC_NOTES)) : -1;
    return doc;
}

/* -- the writer's rows ---------------------------------------------------------------------- */

static void set_put(row_set_t *set, const row_t *row) {
    if (set->len == set->cap) {
        set->cap = set->cap ? set->cap * 2 : 1024;
        set->rows = realloc(set->rows, set->cap * sizeof(row_t));
        if (set->rows == NULL) {
            fputs("loadgen: out of memory\n", stderr);
            exit(70);
        }
    }
    set->rows[set->len++] = *row;
}

static void set_remove(row_set_t *set, size_t index) { set->rows[index] = set->rows[--set->len]; }

void generator_init(generator_t *gen, uint64_t seed, uint64_t first_id, uint64_t id_stride,
                    const key_range_t *range, const double weights[3]) {
    memset(gen, 0, sizeof *gen);
    gen->rng.state = seed;
    gen->next_id = first_id;
    gen->id_stride = id_stride;
    gen->range = *range;
    memcpy(gen->weights, weights, sizeof gen->weights);
}

void generator_free(generator_t *gen) {
    for (int t = 0; t < T_COUNT; t++) free(gen->tables[t].rows);
}

/* The next id of this writer whose `hash` keyspace id lies in its range. */
static uint64_t next_hashed_id(generator_t *gen) {
    unsigned char ksid[KSID_LEN];
    for (;;) {
        uint64_t id = gen->next_id;
        gen->next_id += gen->id_stride;
        hash_ksid(id, ksid);
        if (key_range_contains(&gen->range, ksid)) return id;
    }
}

static uint64_t next_id(generator_t *gen) {
    uint64_t id = gen->next_id;
    gen->next_id += gen->id_stride;
    return id;
}

static void new_user(generator_t *gen, row_t *row) {
    user_row_t *u = &row->user;
    rng_t *rng = &gen->rng;
    memset(u, 0, sizeof *u);
    u->id = (int64_t)next_hashed_id(gen);
    u->first = (uint8_t)rng_below(rng, COUNT(NAMES));
    u->last = (uint8_t)rng_below(rng, COUNT(SURNAMES));
    u->has_email = rng_unit(rng) >= 0.15;
    u->balance = rng_between(rng, 0, 10000000);
    u->visits = (int32_t)rng_between(rng, 0, 50);
    static const uint8_t insert_status[] = {0, 0, 1, 2}; /* active twice as likely */
    u->status = insert_status[rng_below(rng, 4)];
    u->flags = random_set(rng);
    u->profile = random_doc(rng);
    u->created_us = now_us();
    u->updated_us = -1;
}

static void new_order(generator_t *gen, row_t *row) {
    order_row_t *o = &row->order;
    rng_t *rng = &gen->rng;
    row_set_t *users = &gen->tables[T_USERS];
    memset(o, 0, sizeof *o);
    o->order_id = next_id(gen);
    /* the order lives with its user: a user of this writer (on its shard), else a new id */
    o->user_id = users->len ? users->rows[rng_below(rng, users->len)].user.id
                            : (int64_t)next_hashed_id(gen);
    o->sku = (uint8_t)rng_below(rng, COUNT(SKUS));
    o->quantity = (int32_t)rng_between(rng, 1, 20);
    o->price = rng_between(rng, 1, 99999);
    o->note = rng_unit(rng) < 0.5 ? 0 : (uint8_t)rng_between(rng, 1, 5);
    o->state = 0;
    o->placed_us = now_us();
}

static void new_event(generator_t *gen, row_t *row) {
    event_row_t *e = &row->event;
    rng_t *rng = &gen->rng;
    unsigned char ksid[KSID_LEN];
    memset(e, 0, sizeof *e);
    uint64_t id = next_id(gen);
    do { /* the random suffix moves the key until its `xxhash` lands on this shard */
        int n = snprintf(e->key, sizeof e->key, "ev-%llx-%04x", (unsigned long long)id,
                         (unsigned)rng_below(rng, 65536));
        e->key_len = (uint8_t)n;
        xxhash_ksid(e->key, e->key_len, ksid);
    } while (!key_range_contains(&gen->range, ksid));
    e->kind = (uint8_t)rng_below(rng, COUNT(KINDS));
    e->seq = rng_next(rng);
    e->payload_len = rng_unit(rng) < 0.2 ? 0 : (uint8_t)rng_between(rng, 1, 64);
    for (int i = 0; i < e->payload_len; i++) e->payload[i] = (unsigned char)rng_below(rng, 256);
    e->attrs = random_doc(rng);
    e->tags = random_set(rng);
    e->occurred_us = now_us();
}

/* An update of a known row: the columns the Python generator changes, never a key column. */
static uint32_t change_row(generator_t *gen, table_id table, row_t *row) {
    rng_t *rng = &gen->rng;
    if (table == T_USERS) {
        user_row_t *u = &row->user;
        u->visits += 1;
        u->balance += 125;
        u->updated_us = now_us();
        if (rng_unit(rng) >= 0.3) return 1u << 4 | 1u << 3 | 1u << 9;
        u->flags = random_set(rng);
        u->profile = random_doc(rng);
        u->status = (uint8_t)rng_below(rng, 3);
        return 1u << 4 | 1u << 3 | 1u << 9 | 1u << 6 | 1u << 7 | 1u << 5;
    }
    if (table == T_ORDERS) {
        order_row_t *o = &row->order;
        static const uint8_t notes[] = {0, 6, 7}; /* NULL, "gift wrap", "fragile ⚠" */
        o->state = (uint8_t)((o->state + 1) % 4);
        o->quantity += 1;
        o->note = notes[rng_below(rng, 3)];
        return 1u << 6 | 1u << 3 | 1u << 5;
    }
    event_row_t *e = &row->event;
    e->seq += 1;
    e->payload_len = (uint8_t)rng_between(rng, 1, 32);
    for (int i = 0; i < e->payload_len; i++) e->payload[i] = (unsigned char)rng_below(rng, 256);
    e->tags = random_set(rng);
    e->attrs = random_doc(rng);
    return 1u << 2 | 1u << 3 | 1u << 5 | 1u << 4;
}

void generator_change(generator_t *gen, change_t *out) {
    static const table_id tables[] = {T_USERS, T_USERS, T_ORDERS, T_EVENTS};
    table_id table = tables[rng_below(&gen->rng, 4)];
    double pick = rng_unit(&gen->rng) * (gen->weights[0] + gen->weights[1] + gen->weights[2]);
    op_id op = pick < gen->weights[0]                     ? OP_INSERT
               : pick < gen->weights[0] + gen->weights[1] ? OP_UPDATE
                                                          : OP_DELETE;
    row_set_t *set = &gen->tables[table];
    memset(out, 0, sizeof *out);
    out->table = table;
    if (op == OP_INSERT || set->len == 0) {
        out->op = OP_INSERT;
        if (table == T_USERS) new_user(gen, &out->image);
        else if (table == T_ORDERS) new_order(gen, &out->image);
        else new_event(gen, &out->image);
        return;
    }
    out->op = op;
    out->index = rng_below(&gen->rng, set->len);
    out->image = set->rows[out->index];
    if (op == OP_UPDATE) out->updated = change_row(gen, table, &out->image);
}

void generator_apply(generator_t *gen, const change_t *changes, size_t count) {
    for (size_t i = 0; i < count; i++)
        if (changes[i].op == OP_UPDATE)
            gen->tables[changes[i].table].rows[changes[i].index] = changes[i].image;
    /* deletes from the highest slot down, so a removal never moves a row still to remove (the
     * slots of one transaction are distinct: it changes a row at most once) */
    for (int t = 0; t < T_COUNT; t++) {
        size_t below = SIZE_MAX;
        for (;;) {
            const change_t *top = NULL;
            for (size_t i = 0; i < count; i++)
                if (changes[i].op == OP_DELETE && changes[i].table == (table_id)t &&
                    changes[i].index < below && (top == NULL || changes[i].index > top->index))
                    top = &changes[i];
            if (top == NULL) break;
            set_remove(&gen->tables[t], top->index);
            below = top->index;
        }
    }
    for (size_t i = 0; i < count; i++)
        if (changes[i].op == OP_INSERT) set_put(&gen->tables[changes[i].table], &changes[i].image);
}

/* -- keys and images ------------------------------------------------------------------------ */

void row_ksid(table_id table, const row_t *row, unsigned char out[KSID_LEN]) {
    if (table == T_USERS) hash_ksid((uint64_t)row->user.id, out);
    else if (table == T_ORDERS) hash_ksid((uint64_t)row->order.user_id, out);
    else xxhash_ksid(row->event.key, row->event.key_len, out);
}

void row_pk_json(table_id table, const row_t *row, buf_t *out) {
    if (table == T_USERS) { buf_puts(out, "{\"id\":"); buf_i64(out, row->user.id); buf_putc(out, '}'); }
    else if (table == T_ORDERS)
        { buf_puts(out, "{\"order_id\":"); buf_u64(out, row->order.order_id); buf_putc(out, '}'); }
    else {
        buf_puts(out, "{\"event_key\":");
        buf_json_string(out, row->event.key, row->event.key_len);
        buf_putc(out, '}');
    }
}

/* A DATETIME(6) value: `sep` ' ' for SQL, 'T' for Python's isoformat (no fraction at .000000).
 * The text of the second is kept per thread: rows of one second share it. */
static void put_datetime(buf_t *out, int64_t us, char sep, int iso) {
    static __thread time_t cached = -1;
    static __thread char date[72]; /* YYYY-MM-DD HH:MM:SS (room for any int, as snprintf sees it) */
    time_t seconds = (time_t)(us / 1000000);
    long fraction = (long)(us % 1000000);
    if (seconds != cached) {
        struct tm tm;
        gmtime_r(&seconds, &tm);
        snprintf(date, sizeof date, "%04d-%02d-%02d %02d:%02d:%02d", tm.tm_year + 1900,
                 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
        cached = seconds;
    }
    buf_put(out, date, 10);
    buf_putc(out, sep);
    buf_put(out, date + 11, 8);
    if (fraction || !iso) {
        char digits[7];
        for (int i = 5; i >= 0; i--, fraction /= 10) digits[i] = (char)('0' + fraction % 10);
        buf_putc(out, '.');
        buf_put(out, digits, 6);
    }
}

static void put_cents(buf_t *out, int64_t cents) {
    buf_i64(out, cents / 100);
    buf_putc(out, '.');
    buf_putc(out, (char)('0' + cents % 100 / 10));
    buf_putc(out, (char)('0' + cents % 10));
}

/* The JSON text of a document, as json.dumps(doc, ensure_ascii=False, sort_keys=True). */
static void doc_text(const json_doc_t *doc, buf_t *out) {
    buf_putc(out, '{');
    if (doc->note >= 0) buf_printf(out, "\"note\": \"%s\", ", DOC_NOTES[doc->note]);
    buf_printf(out, "\"score\": %d, \"tags\": [\"%s\", \"%s\"]}", doc->score,
               DOC_TAGS[doc->tag_a], DOC_TAGS[doc->tag_b]);
}

static void order_note_text(uint8_t note, buf_t *out) {
    if (note >= 1 && note <= 5)
        for (int i = 0; i < note; i++) buf_puts(out, LEAVE);
    else if (note == 6) buf_puts(out, "gift wrap");
    else buf_puts(out, "fragile ⚠");
}

static void user_name(const user_row_t *u, buf_t *out) {
    buf_printf(out, "%s %s", NAMES[u->first], SURNAMES[u->last]);
}

/* A scratch buffer of this thread, empty. */
static buf_t *scratch_buffer(void) {
    static __thread buf_t scratch;
    if (scratch.data == NULL) buf_init(&scratch, 512);
    buf_reset(&scratch);
    return &scratch;
}

/* -- the after image as JSON ---------------------------------------------------------------- */

static void json_text_value(buf_t *out, buf_t *scratch) {
    buf_json_string(out, scratch->data, scratch->len);
    buf_reset(scratch);
}

static void json_doc_value(buf_t *out, const json_doc_t *doc, buf_t *scratch) {
    if (!doc->present) {
        buf_puts(out, "null");
        return;
    }
    doc_text(doc, scratch);
    json_text_value(out, scratch);
}

static void json_set_value(buf_t *out, uint8_t mask, const char *const labels[3]) {
    if (!mask) {
        buf_puts(out, "null");
        return;
    }
    buf_putc(out, '[');
    int first = 1;
    for (int i = 0; i < 3; i++)
        if (mask & (1u << i)) {
            buf_printf(out, "%s\"%s\"", first ? "" : ",", labels[i]);
            first = 0;
        }
    buf_putc(out, ']');
}

static void json_datetime(buf_t *out, int64_t us) {
    if (us < 0) {
        buf_puts(out, "null");
        return;
    }
    buf_putc(out, '"');
    put_datetime(out, us, 'T', 1);
    buf_putc(out, '"');
}

void row_image_json(table_id table, const row_t *row, buf_t *out) {
    buf_t *scratch = scratch_buffer();
    if (table == T_USERS) {
        const user_row_t *u = &row->user;
        buf_printf(out, "{\"id\":%lld,\"name\":", (long long)u->id);
        user_name(u, scratch);
        json_text_value(out, scratch);
        if (u->has_email) buf_printf(out, ",\"email\":\"user%lld@example.com\"", (long long)u->id);
        else buf_puts(out, ",\"email\":null");
        buf_puts(out, ",\"balance\":\"");
        put_cents(out, u->balance);
        buf_printf(out, "\",\"visits\":%d,\"status\":\"%s\",\"flags\":", u->visits,
                   STATUSES[u->status]);
        json_set_value(out, u->flags, FLAG_LABELS);
        buf_puts(out, ",\"profile\":");
        json_doc_value(out, &u->profile, scratch);
        buf_puts(out, ",\"created_at\":");
        json_datetime(out, u->created_us);
        buf_puts(out, ",\"updated_at\":");
        json_datetime(out, u->updated_us);
    } else if (table == T_ORDERS) {
        const order_row_t *o = &row->order;
        buf_printf(out, "{\"order_id\":%llu,\"user_id\":%lld,\"sku\":\"%s\",\"quantity\":%d,"
                        "\"price\":\"", (unsigned long long)o->order_id, (long long)o->user_id,
                   SKUS[o->sku], o->quantity);
        put_cents(out, o->price);
        buf_puts(out, "\",\"note\":");
        if (o->note) {
            order_note_text(o->note, scratch);
            json_text_value(out, scratch);
        } else buf_puts(out, "null");
        buf_printf(out, ",\"state\":\"%s\",\"placed_at\":", STATES[o->state]);
        json_datetime(out, o->placed_us);
    } else {
        const event_row_t *e = &row->event;
        buf_puts(out, "{\"event_key\":");
        buf_json_string(out, e->key, e->key_len);
        buf_printf(out, ",\"kind\":\"%s\",\"seq\":%llu,\"payload\":", KINDS[e->kind],
                   (unsigned long long)e->seq);
        if (e->payload_len) {
            buf_puts(out, "{\"$base64\":\"");
            buf_base64(out, e->payload, e->payload_len);
            buf_puts(out, "\"}");
        } else buf_puts(out, "null");
        buf_puts(out, ",\"attrs\":");
        json_doc_value(out, &e->attrs, scratch);
        buf_puts(out, ",\"tags\":");
        json_set_value(out, e->tags, TAG_LABELS);
        buf_puts(out, ",\"occurred_at\":");
        json_datetime(out, e->occurred_us);
    }
    buf_putc(out, '}');
}

/* -- SQL ------------------------------------------------------------------------------------ */

static const char *const COLUMNS[T_COUNT][10] = {
    {"id", "name", "email", "balance", "visits", "status", "flags", "profile", "created_at",
     "updated_at"},
    {"order_id", "user_id", "sku", "quantity", "price", "note", "state", "placed_at"},
    {"event_key", "kind", "seq", "payload", "attrs", "tags", "occurred_at"},
};
static const int COLUMN_COUNT[T_COUNT] = {10, 8, 7};

void sql_insert_head(table_id table, buf_t *out) {
    buf_printf(out, "INSERT INTO `%s` (", TABLE_NAMES[table]);
    for (int c = 0; c < COLUMN_COUNT[table]; c++)
        buf_printf(out, "%s`%s`", c ? ", " : "", COLUMNS[table][c]);
    buf_puts(out, ") VALUES ");
}

static void sql_text(MYSQL *conn, buf_t *out, const char *text, size_t len) {
    buf_reserve(out, len * 2 + 3);
    out->data[out->len++] = '\'';
    out->len += mysql_real_escape_string(conn, out->data + out->len, text, (unsigned long)len);
    out->data[out->len++] = '\'';
    out->data[out->len] = '\0';
}

static void sql_scratch(MYSQL *conn, buf_t *out, buf_t *scratch) {
    sql_text(conn, out, scratch->data, scratch->len);
    buf_reset(scratch);
}

static void sql_datetime(buf_t *out, int64_t us) {
    if (us < 0) {
        buf_puts(out, "NULL");
        return;
    }
    buf_putc(out, '\'');
    put_datetime(out, us, ' ', 0);
    buf_putc(out, '\'');
}

static void sql_set(buf_t *out, uint8_t mask, const char *const labels[3]) {
    if (!mask) {
        buf_puts(out, "NULL");
        return;
    }
    buf_putc(out, '\'');
    int first = 1;
    for (int i = 0; i < 3; i++)
        if (mask & (1u << i)) {
            buf_printf(out, "%s%s", first ? "" : ",", labels[i]);
            first = 0;
        }
    buf_putc(out, '\'');
}

/* One column's value as an SQL literal. */
static void sql_column(MYSQL *conn, table_id table, const row_t *row, int column, buf_t *out,
                       buf_t *scratch) {
    if (table == T_USERS) {
        const user_row_t *u = &row->user;
        switch (column) {
            case 0: buf_i64(out, u->id); return;
            case 1: user_name(u, scratch); sql_scratch(conn, out, scratch); return;
            case 2:
                if (u->has_email) buf_printf(out, "'user%lld@example.com'", (long long)u->id);
                else buf_puts(out, "NULL");
                return;
            case 3: put_cents(out, u->balance); return;
            case 4: buf_i64(out, u->visits); return;
            case 5: buf_printf(out, "'%s'", STATUSES[u->status]); return;
            case 6: sql_set(out, u->flags, FLAG_LABELS); return;
            case 7:
                if (!u->profile.present) buf_puts(out, "NULL");
                else { doc_text(&u->profile, scratch); sql_scratch(conn, out, scratch); }
                return;
            case 8: sql_datetime(out, u->created_us); return;
            default: sql_datetime(out, u->updated_us); return;
        }
    }
    if (table == T_ORDERS) {
        const order_row_t *o = &row->order;
        switch (column) {
            case 0: buf_u64(out, o->order_id); return;
            case 1: buf_i64(out, o->user_id); return;
            case 2: buf_printf(out, "'%s'", SKUS[o->sku]); return;
            case 3: buf_i64(out, o->quantity); return;
            case 4: put_cents(out, o->price); return;
            case 5:
                if (!o->note) buf_puts(out, "NULL");
                else { order_note_text(o->note, scratch); sql_scratch(conn, out, scratch); }
                return;
            case 6: buf_printf(out, "'%s'", STATES[o->state]); return;
            default: sql_datetime(out, o->placed_us); return;
        }
    }
    const event_row_t *e = &row->event;
    switch (column) {
        case 0: sql_text(conn, out, e->key, e->key_len); return;
        case 1: buf_printf(out, "'%s'", KINDS[e->kind]); return;
        case 2: buf_u64(out, e->seq); return;
        case 3:
            if (!e->payload_len) buf_puts(out, "NULL");
            else { buf_puts(out, "X'"); buf_hex(out, e->payload, e->payload_len); buf_putc(out, '\''); }
            return;
        case 4:
            if (!e->attrs.present) buf_puts(out, "NULL");
            else { doc_text(&e->attrs, scratch); sql_scratch(conn, out, scratch); }
            return;
        case 5: sql_set(out, e->tags, TAG_LABELS); return;
        default: sql_datetime(out, e->occurred_us); return;
    }
}

void sql_values(MYSQL *conn, table_id table, const row_t *row, buf_t *out) {
    buf_t *scratch = scratch_buffer();
    buf_putc(out, '(');
    for (int c = 0; c < COLUMN_COUNT[table]; c++) {
        if (c) buf_puts(out, ", ");
        sql_column(conn, table, row, c, out, scratch);
    }
    buf_putc(out, ')');
}

static void sql_where(MYSQL *conn, table_id table, const row_t *row, buf_t *out) {
    buf_printf(out, " WHERE `%s` = ", COLUMNS[table][0]);
    sql_column(conn, table, row, 0, out, scratch_buffer());
}

void sql_update(MYSQL *conn, const change_t *change, buf_t *out) {
    buf_t *scratch = scratch_buffer();
    buf_printf(out, "UPDATE `%s` SET ", TABLE_NAMES[change->table]);
    int first = 1;
    for (int c = 0; c < COLUMN_COUNT[change->table]; c++) {
        if (!(change->updated & (1u << c))) continue;
        buf_printf(out, "%s`%s` = ", first ? "" : ", ", COLUMNS[change->table][c]);
        sql_column(conn, change->table, &change->image, c, out, scratch);
        first = 0;
    }
    sql_where(conn, change->table, &change->image, out);
}

void sql_delete(MYSQL *conn, table_id table, const row_t *row, buf_t *out) {
    buf_printf(out, "DELETE FROM `%s`", TABLE_NAMES[table]);
    sql_where(conn, table, row, out);
}
