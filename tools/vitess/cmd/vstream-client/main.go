// vstream-client reads a keyspace's changes from vtgate's VStream API and prints one JSON
// line per event on stdout: row changes with their column values, the source commit time
// (seconds), the time the tablet sent the event and the time this client received it
// (nanoseconds), VGTID positions and reshard journals. It is the plain VStream reader the peer
// benchmark runs beside the change stream.
//
// With --vgtid-file, the last VGTID received is written to that file after each transaction
// (temporary file and rename), and a later run resumes from it, as a VStream consumer that
// saves its position would. A stream that vtgate ends with an error exits with status 1 after
// printing {"type":"ERROR","error":...}.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"vitess.io/vitess/go/sqltypes"
	binlogdatapb "vitess.io/vitess/go/vt/proto/binlogdata"
	querypb "vitess.io/vitess/go/vt/proto/query"
	topodatapb "vitess.io/vitess/go/vt/proto/topodata"
	vtgatepb "vitess.io/vitess/go/vt/proto/vtgate"
	_ "vitess.io/vitess/go/vt/vtgate/grpcvtgateconn"
	"vitess.io/vitess/go/vt/vtgate/vtgateconn"
)

type options struct {
	server        string
	keyspace      string
	vgtidFile     string
	stopOnReshard bool
	journals      bool
}

func main() {
	var opts options
	flag.StringVar(&opts.server, "server", "127.0.0.1:15991", "vtgate gRPC address")
	flag.StringVar(&opts.keyspace, "keyspace", "commerce", "keyspace to stream")
	flag.StringVar(&opts.vgtidFile, "vgtid-file", "", "resume from and save the VGTID in this file")
	flag.BoolVar(&opts.stopOnReshard, "stop-on-reshard", false, "end the stream at a reshard journal")
	flag.BoolVar(&opts.journals, "journal-events", true, "print reshard journals without stopping")
	flag.Parse()
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := run(ctx, opts, json.NewEncoder(os.Stdout)); err != nil && ctx.Err() == nil {
		_ = json.NewEncoder(os.Stdout).Encode(map[string]any{"type": "ERROR", "error": err.Error()})
		os.Exit(1)
	}
}

func startPosition(opts options) (*binlogdatapb.VGtid, error) {
	if opts.vgtidFile != "" {
		data, err := os.ReadFile(opts.vgtidFile)
		if err == nil {
			vgtid := &binlogdatapb.VGtid{}
			if err := protojson.Unmarshal(data, vgtid); err != nil {
				return nil, fmt.Errorf("VGTID file %s is not a VGTID: %w", opts.vgtidFile, err)
			}
			return vgtid, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	// every shard of the keyspace, from now on
	return &binlogdatapb.VGtid{ShardGtids: []*binlogdatapb.ShardGtid{
		{Keyspace: opts.keyspace, Gtid: "current"},
	}}, nil
}

func run(ctx context.Context, opts options, out *json.Encoder) error {
	vgtid, err := startPosition(opts)
	if err != nil {
		return err
	}
	conn, err := vtgateconn.Dial(ctx, opts.server)
	if err != nil {
		return fmt.Errorf("cannot reach vtgate at %s: %w", opts.server, err)
	}
	defer conn.Close()
	filter := &binlogdatapb.Filter{Rules: []*binlogdatapb.Rule{{Match: "/.*/"}}}
	flags := &vtgatepb.VStreamFlags{
		StopOnReshard:               opts.stopOnReshard,
		IncludeReshardJournalEvents: opts.journals,
	}
	reader, err := conn.VStream(ctx, topodatapb.TabletType_PRIMARY, vgtid, filter, flags)
	if err != nil {
		return err
	}
	fields := map[string][]*querypb.Field{}
	for {
		events, err := reader.Recv()
		if err == io.EOF {
			return out.Encode(map[string]any{"type": "EOF"})
		}
		if err != nil {
			return err
		}
		received := time.Now().UnixNano()
		for _, event := range events {
			if err := emit(out, opts, event, fields, received); err != nil {
				return err
			}
		}
	}
}

func emit(out *json.Encoder, opts options, event *binlogdatapb.VEvent,
	fields map[string][]*querypb.Field, received int64) error {
	line := map[string]any{
		"type":         event.Type.String(),
		"keyspace":     event.Keyspace,
		"shard":        event.Shard,
		"commit_time":  event.Timestamp,
		"current_time": event.CurrentTime,
		"received":     received,
	}
	switch event.Type {
	case binlogdatapb.VEventType_FIELD:
		fields[event.FieldEvent.TableName] = event.FieldEvent.Fields
		return nil
	case binlogdatapb.VEventType_ROW:
		line["table"] = event.RowEvent.TableName
		line["changes"] = rowChanges(event.RowEvent, fields[event.RowEvent.TableName])
	case binlogdatapb.VEventType_VGTID:
		line["vgtid"] = json.RawMessage(protojson.Format(event.Vgtid))
		if err := saveVgtid(opts.vgtidFile, event.Vgtid); err != nil {
			return err
		}
	case binlogdatapb.VEventType_JOURNAL:
		line["journal"] = json.RawMessage(protojson.Format(event.Journal))
	case binlogdatapb.VEventType_HEARTBEAT:
		return nil
	}
	return out.Encode(line)
}

func rowChanges(event *binlogdatapb.RowEvent, fields []*querypb.Field) []map[string]any {
	changes := make([]map[string]any, 0, len(event.RowChanges))
	for _, change := range event.RowChanges {
		changes = append(changes, map[string]any{
			"before": rowValues(fields, change.Before),
			"after":  rowValues(fields, change.After),
		})
	}
	return changes
}

func rowValues(fields []*querypb.Field, row *querypb.Row) map[string]any {
	if row == nil {
		return nil
	}
	values := map[string]any{}
	for i, value := range sqltypes.MakeRowTrusted(fields, row) {
		if value.IsNull() {
			values[fields[i].Name] = nil
		} else {
			values[fields[i].Name] = value.ToString()
		}
	}
	return values
}

func saveVgtid(path string, vgtid *binlogdatapb.VGtid) error {
	if path == "" {
		return nil
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".vgtid-")
	if err != nil {
		return err
	}
	if _, err := tmp.WriteString(protojson.Format(vgtid)); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
