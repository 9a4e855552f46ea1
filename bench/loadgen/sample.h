/* The sample keyspace (`users`, `orders`, `events`): random rows and changes with the values,
 * columns and mix of `updatestream devcluster traffic`, their SQL, their primary key and
 * after-image JSON as the ledger writes them, and their keyspace ids. */
#ifndef LOADGEN_SAMPLE_H
#define LOADGEN_SAMPLE_H

#include <mysql.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "vindex.h"

typedef enum { T_USERS, T_ORDERS, T_EVENTS, T_COUNT } table_id;
typedef enum { OP_INSERT, OP_UPDATE, OP_DELETE } op_id;

extern const char *const TABLE_NAMES[T_COUNT];
extern const char *const OP_NAMES[3];

/* A JSON column's document: {"note": ..., "score": n, "tags": [a, b]}; absent = NULL. */
typedef struct {
    uint8_t present;
    int8_t note; /* -1: no note */
    uint8_t tag_a, tag_b;
    int16_t score;
} json_doc_t;

typedef struct {
    int64_t id;
    int64_t balance; /* cents */
    int64_t created_us, updated_us; /* unix microseconds; updated_us < 0: NULL */
    int32_t visits;
    uint8_t first, last, has_email, status, flags; /* flags: bit mask of SET labels, 0: NULL */
    json_doc_t profile;
} user_row_t;

typedef struct {
    uint64_t order_id;
    int64_t user_id;
    int64_t price; /* cents */
    int64_t placed_us;
    int32_t quantity;
    uint8_t sku, state, note; /* note: 0 NULL, 1..5 "leave at the door" times n, 6, 7 */
} order_row_t;

typedef struct {
    uint64_t seq;
    int64_t occurred_us;
    char key[40];
    uint8_t key_len, kind, tags, payload_len; /* payload_len 0: NULL */
    json_doc_t attrs;
    unsigned char payload[64];
} event_row_t;

typedef union {
    user_row_t user;
    order_row_t order;
    event_row_t event;
} row_t;

/* The rows one writer knows (it is the only writer of them): O(1) add, replace, remove, pick. */
typedef struct {
    row_t *rows;
    size_t len, cap;
} row_set_t;

typedef struct {
    uint64_t state;
} rng_t;

/* What one writer needs to make rows: its random numbers, its ids, its shard. */
typedef struct {
    rng_t rng;
    uint64_t next_id, id_stride;
    key_range_t range; /* every row made lands in this range */
    row_set_t tables[T_COUNT];
    double weights[3]; /* insert, update, delete */
} generator_t;

typedef struct {
    table_id table;
    op_id op;
    size_t index; /* the row's slot in its set, for updates and deletes */
    uint32_t updated; /* bit mask of the columns an update sets */
    row_t image; /* the after image; the before image for a delete */
} change_t;

void generator_init(generator_t *gen, uint64_t seed, uint64_t first_id, uint64_t id_stride,
                    const key_range_t *range, const double weights[3]);
void generator_free(generator_t *gen);
/* One random change of the mix (a table, then an op; an insert when the table has no row). */
void generator_change(generator_t *gen, change_t *out);
/* After a commit: the changes' effect on the writer's rows. */
void generator_apply(generator_t *gen, const change_t *changes, size_t count);
uint64_t rng_below(rng_t *rng, uint64_t bound);

void row_ksid(table_id table, const row_t *row, unsigned char out[KSID_LEN]);
void row_pk_json(table_id table, const row_t *row, buf_t *out);
/* The after image as `encode_row` writes it (compact JSON, columns in table order). */
void row_image_json(table_id table, const row_t *row, buf_t *out);
/* SQL: the INSERT head, one row's VALUES tuple, an UPDATE of `updated`, a DELETE. */
void sql_insert_head(table_id table, buf_t *out);
void sql_values(MYSQL *conn, table_id table, const row_t *row, buf_t *out);
void sql_update(MYSQL *conn, const change_t *change, buf_t *out);
void sql_delete(MYSQL *conn, table_id table, const row_t *row, buf_t *out);

#endif
