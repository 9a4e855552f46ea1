package io.updatestream.bench;

import io.debezium.embedded.Connect;
import io.debezium.engine.DebeziumEngine;
import io.debezium.engine.RecordChangeEvent;
import io.debezium.engine.format.ChangeEventFormat;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.connect.data.Struct;
import org.apache.kafka.connect.source.SourceRecord;

/**
 * Runs Debezium's embedded engine against one server and reports, as one JSON object per line
 * on standard output, when row changes reached the application.
 *
 * <p>Usage: {@code DebeziumPeer [--expect N] [--seed-offset JSON] key=value...}; every
 * {@code key=value} is a Debezium or connector property. With {@code --expect N} (catch-up) the harness prints no line
 * per change, only the first and last receive times once N row changes arrived, and then stops.
 * Without it, it prints one {@code change} line per row change (receive time, GTID, binlog
 * file and position; on Vitess the shard and VGTID; the record key's fields) until standard
 * input closes.
 *
 * <p>Lines: {@code jvm} (the JVM's start and main's start), {@code started} (the connector
 * task runs), {@code change}, {@code done}, {@code stopped}, {@code error}. Times are unix
 * seconds as floats.
 */
public final class DebeziumPeer {
    private static final PrintStream OUT =
            new PrintStream(System.out, false, StandardCharsets.UTF_8);

    private DebeziumPeer() {}

    static double now() {
        Instant at = Instant.now();
        return at.getEpochSecond() + at.getNano() / 1e9;
    }

    static synchronized void emit(String json) {
        OUT.println(json);
    }

    static synchronized void flush() {
        OUT.flush();
    }

    static String quoted(Object value) {
        if (value == null) {
            return "null";
        }
        String text = value.toString();
        StringBuilder out = new StringBuilder(text.length() + 2).append('"');
        for (char c : text.toCharArray()) {
            if (c == '"' || c == '\\') {
                out.append('\\').append(c);
            } else if (c < 0x20) {
                out.append(String.format("\\u%04x", (int) c));
            } else {
                out.append(c);
            }
        }
        return out.append('"').toString();
    }

    /** A record key's fields as a JSON object: numbers as numbers, anything else as text. */
    static String structJson(Object key) {
        if (!(key instanceof Struct struct)) {
            return "null";
        }
        StringBuilder out = new StringBuilder("{");
        for (org.apache.kafka.connect.data.Field field : struct.schema().fields()) {
            Object value = struct.get(field);
            if (out.length() > 1) {
                out.append(',');
            }
            out.append(quoted(field.name())).append(':');
            out.append(value instanceof Number ? value.toString() : quoted(value));
        }
        return out.append('}').toString();
    }

    static Object sourceField(Struct source, String name) {
        return source.schema().field(name) == null ? null : source.get(name);
    }

    /** Counts (and in streaming mode reports) the row changes of each batch the engine hands over. */
    static final class Consumer
            implements DebeziumEngine.ChangeConsumer<RecordChangeEvent<SourceRecord>> {
        private final long expect;
        private final CountDownLatch finished;
        private long count;
        private long batches;
        private double first;
        private double last;

        Consumer(long expect, CountDownLatch finished) {
            this.expect = expect;
            this.finished = finished;
        }

        @Override
        public void handleBatch(
                List<RecordChangeEvent<SourceRecord>> records,
                DebeziumEngine.RecordCommitter<RecordChangeEvent<SourceRecord>> committer)
                throws InterruptedException {
            double received = now();
            batches++;
            for (RecordChangeEvent<SourceRecord> event : records) {
                SourceRecord record = event.record();
                if (record.value() instanceof Struct value
                        && value.schema().field("op") != null
                        && value.get("op") != null) {
                    count++;
                    if (count == 1) {
                        first = received;
                    }
                    last = received;
                    if (expect <= 0) {
                        Struct source = value.getStruct("source");
                        emit("{\"type\":\"change\",\"t\":" + received
                                + ",\"op\":" + quoted(value.get("op"))
                                + ",\"table\":" + quoted(sourceField(source, "table"))
                                + ",\"gtid\":" + quoted(sourceField(source, "gtid"))
                                + ",\"file\":" + quoted(sourceField(source, "file"))
                                + ",\"pos\":" + sourceField(source, "pos")
                                + ",\"row\":" + sourceField(source, "row")
                                + ",\"ts_ms\":" + sourceField(source, "ts_ms")
                                + ",\"shard\":" + quoted(sourceField(source, "shard"))
                                + ",\"vgtid\":" + quoted(sourceField(source, "vgtid"))
                                + ",\"key\":" + structJson(record.key()) + "}");
                    }
                }
                committer.markProcessed(event);
            }
            committer.markBatchFinished();
            if (expect <= 0) {
                flush();
            } else if (count >= expect && finished.getCount() > 0) {
                emit("{\"type\":\"done\",\"count\":" + count + ",\"batches\":" + batches
                        + ",\"first\":" + first + ",\"last\":" + last + "}");
                flush();
                finished.countDown();
            }
        }
    }

    public static void main(String[] args) throws Exception {
        double mainAt = now();
        double jvmAt = ManagementFactory.getRuntimeMXBean().getStartTime() / 1000.0;
        long expect = 0;
        String seedOffset = null;
        Properties props = new Properties();
        for (int i = 0; i < args.length; i++) {
            if (args[i].equals("--expect")) {
                expect = Long.parseLong(args[++i]);
            } else if (args[i].equals("--seed-offset")) {
                seedOffset = args[++i];
            } else {
                int eq = args[i].indexOf('=');
                if (eq <= 0) {
                    throw new IllegalArgumentException("expected key=value, got " + args[i]);
                }
                props.setProperty(args[i].substring(0, eq), args[i].substring(eq + 1));
            }
        }
        emit("{\"type\":\"jvm\",\"jvm_start\":" + jvmAt + ",\"main\":" + mainAt + "}");
        flush();
        if (seedOffset != null) {
            seedOffsets(props, seedOffset);
        }

        CountDownLatch finished = new CountDownLatch(1);
        Consumer consumer = new Consumer(expect, finished);
        DebeziumEngine<RecordChangeEvent<SourceRecord>> engine =
                DebeziumEngine.create(ChangeEventFormat.of(Connect.class))
                        .using(props)
                        .using(new DebeziumEngine.ConnectorCallback() {
                            @Override
                            public void taskStarted() {
                                emit("{\"type\":\"started\",\"t\":" + now() + "}");
                                flush();
                            }
                        })
                        .using((success, message, error) -> {
                            if (!success) {
                                emit("{\"type\":\"error\",\"message\":" + quoted(message)
                                        + ",\"error\":" + quoted(error) + "}");
                                flush();
                            }
                            finished.countDown();
                        })
                        .notifying(consumer)
                        .build();
        ExecutorService executor = Executors.newSingleThreadExecutor();
        executor.execute(engine);
        if (expect <= 0) {
            Thread stdin = new Thread(() -> {
                try (BufferedReader in = new BufferedReader(
                        new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                    while (in.readLine() != null) {
                        // any input is ignored; the end of input stops the harness
                    }
                } catch (Exception ignored) {
                    // the end of input all the same
                }
                finished.countDown();
            });
            stdin.setDaemon(true);
            stdin.start();
        }
        finished.await();
        int status = 0;
        try {
            engine.close();
        } catch (IllegalStateException alreadyStopped) {
            status = 1; // the engine failed (its error line is out): the JVM must still exit
        }
        executor.shutdown();
        executor.awaitTermination(60, TimeUnit.SECONDS);
        emit("{\"type\":\"stopped\",\"t\":" + now() + ",\"count\":" + consumer.count + "}");
        flush();
        System.exit(status);
    }

    /**
     * Writes the engine's file offset store before it starts, holding one source offset (a JSON
     * object such as {@code {"file":"binlog.000001","pos":4}}) for the connector's partition
     * {@code {"server": topic.prefix}}: with {@code snapshot.mode=recovery} a MySQL connector
     * then reads the binlog from there, as {@code never} did before Debezium 3.
     */
    static void seedOffsets(Properties props, String offset) throws Exception {
        String file = props.getProperty("offset.storage.file.filename");
        if (file == null) {
            throw new IllegalArgumentException("--seed-offset needs offset.storage.file.filename");
        }
        String key = "[" + quoted(props.getProperty("name")) + ",{\"server\":"
                + quoted(props.getProperty("topic.prefix")) + "}]";
        java.util.HashMap<byte[], byte[]> offsets = new java.util.HashMap<>();
        offsets.put(key.getBytes(StandardCharsets.UTF_8), offset.getBytes(StandardCharsets.UTF_8));
        try (java.io.ObjectOutputStream out = new java.io.ObjectOutputStream(
                new java.io.FileOutputStream(file))) {
            out.writeObject(offsets);
        }
    }
}
