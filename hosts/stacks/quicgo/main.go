// startlab-quicgo: quic-go behind startlab's stack endpoint contract (hosts/stacks).
//
//	startlab-quicgo server --listen IP:PORT --cert C --key K [--qlog-dir D]
//	startlab-quicgo client --server IP:PORT --size N [--qlog-dir D] [--timeout-s T]
//	startlab-quicgo version
//
// The server answers an HTTP/0.9 request ("GET /N", ALPN hq-interop, as the QUIC interop
// runner's endpoints) on each bidirectional stream with N bytes and the stream's FIN. The
// client fetches one object and prints one JSON object: ok, bytes, fct_s (from dialling
// to the last byte), handshake_s, and quic-go's own connection counters. quic-go chooses
// its congestion control itself (NewReno with HyStart-like HybridSlowStart, 32 datagrams
// initially, paced): nothing here changes it, so what runs is the stack's default.
package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/qlog"
)

const alpn = "hq-interop"

// The largest object a request may ask for: more than any run's long flow carries.
const maxObject = 1 << 40

func main() {
	if len(os.Args) == 2 && os.Args[1] == "version" {
		fmt.Println(moduleVersion())
		return
	}
	if len(os.Args) < 2 || (os.Args[1] != "server" && os.Args[1] != "client") {
		fmt.Fprintln(os.Stderr, "usage: startlab-quicgo server|client|version [flags]")
		os.Exit(2)
	}
	var err error
	if os.Args[1] == "server" {
		err = server(os.Args[2:])
	} else {
		err = client(os.Args[2:])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "startlab-quicgo:", err)
		os.Exit(1)
	}
}

func config(qlogDir string) *quic.Config {
	conf := &quic.Config{MaxIdleTimeout: 30 * time.Second,
		// Receive windows large enough that flow control never limits a startup.
		InitialStreamReceiveWindow: 16 << 20, MaxStreamReceiveWindow: 64 << 20,
		InitialConnectionReceiveWindow: 16 << 20, MaxConnectionReceiveWindow: 64 << 20}
	if qlogDir != "" {
		os.Setenv("QLOGDIR", qlogDir) // qlog.DefaultConnectionTracer's directory
		conf.Tracer = qlog.DefaultConnectionTracer
	}
	return conf
}

func server(args []string) error {
	fs := flag.NewFlagSet("server", flag.ExitOnError)
	listen := fs.String("listen", "", "IP:PORT")
	cert := fs.String("cert", "", "certificate (PEM)")
	key := fs.String("key", "", "private key (PEM)")
	qlogDir := fs.String("qlog-dir", "", "write each connection's qlog here")
	fs.Parse(args)
	pair, err := tls.LoadX509KeyPair(*cert, *key)
	if err != nil {
		return err
	}
	tlsConf := &tls.Config{Certificates: []tls.Certificate{pair}, NextProtos: []string{alpn}}
	ln, err := quic.ListenAddr(*listen, tlsConf, config(*qlogDir))
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "listening on %s\n", *listen)
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() { <-stop; ln.Close() }()
	for {
		conn, err := ln.Accept(context.Background())
		if err != nil {
			// Closed by a signal: give the connections' qlogs a moment to be written.
			time.Sleep(200 * time.Millisecond)
			return nil
		}
		go serve(conn)
	}
}

func serve(conn *quic.Conn) {
	for {
		stream, err := conn.AcceptStream(context.Background())
		if err != nil {
			return
		}
		go func() {
			defer stream.Close()
			size, err := request(stream)
			if err != nil {
				stream.CancelWrite(1)
				return
			}
			if _, err := io.CopyN(stream, zeros{}, size); err != nil {
				return
			}
		}()
	}
}

// request reads "GET /N" up to its line end, and returns N.
func request(r io.Reader) (int64, error) {
	buf := make([]byte, 0, 64)
	one := make([]byte, 1)
	for len(buf) < 64 {
		if _, err := r.Read(one); err != nil {
			if errors.Is(err, io.EOF) && len(buf) > 0 {
				break
			}
			return 0, err
		}
		if one[0] == '\n' {
			break
		}
		buf = append(buf, one[0])
	}
	line := strings.TrimSpace(string(buf))
	path, ok := strings.CutPrefix(line, "GET /")
	if !ok {
		return 0, fmt.Errorf("not a request: %q", line)
	}
	n, err := strconv.ParseInt(path, 10, 64)
	if err != nil || n < 0 || n > maxObject {
		return 0, fmt.Errorf("not an object size: %q", path)
	}
	return n, nil
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

type report struct {
	Ok          bool              `json:"ok"`
	Error       string            `json:"error,omitempty"`
	Stack       string            `json:"stack"`
	Version     string            `json:"version"`
	Bytes       int64             `json:"bytes"`
	FctS        float64           `json:"fct_s"`
	HandshakeS  float64           `json:"handshake_s"`
	StartUnixS  float64           `json:"start_unix_s"`
	Connection  map[string]uint64 `json:"connection"`
	SmoothedRtt float64           `json:"smoothed_rtt_ms"`
}

func client(args []string) error {
	fs := flag.NewFlagSet("client", flag.ExitOnError)
	server := fs.String("server", "", "IP:PORT")
	size := fs.Int64("size", 0, "object size in bytes")
	qlogDir := fs.String("qlog-dir", "", "write the connection's qlog here")
	timeout := fs.Float64("timeout-s", 60, "give up after this long")
	fs.Parse(args)
	rep := report{Stack: "quic-go", Version: moduleVersion()}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(*timeout*float64(time.Second)))
	defer cancel()
	start := time.Now()
	rep.StartUnixS = float64(start.UnixNano()) / 1e9
	err := func() error {
		tlsConf := &tls.Config{InsecureSkipVerify: true, NextProtos: []string{alpn}}
		conn, err := quic.DialAddr(ctx, *server, tlsConf, config(*qlogDir))
		if err != nil {
			return err
		}
		defer conn.CloseWithError(0, "")
		rep.HandshakeS = time.Since(start).Seconds()
		stream, err := conn.OpenStreamSync(ctx)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(stream, "GET /%d\r\n", *size); err != nil {
			return err
		}
		stream.Close()
		n, err := io.Copy(io.Discard, stream)
		rep.Bytes = n
		rep.FctS = time.Since(start).Seconds()
		st := conn.ConnectionStats()
		rep.SmoothedRtt = float64(st.SmoothedRTT.Microseconds()) / 1e3
		rep.Connection = map[string]uint64{"bytes_received": st.BytesReceived, "packets_received": st.PacketsReceived,
			"bytes_sent": st.BytesSent, "packets_sent": st.PacketsSent}
		if err != nil {
			return err
		}
		if n != *size {
			return fmt.Errorf("got %d of %d bytes", n, *size)
		}
		return nil
	}()
	rep.Ok = err == nil
	if err != nil {
		rep.Error = err.Error()
	}
	out, _ := json.Marshal(rep)
	fmt.Println(string(out))
	if !rep.Ok {
		os.Exit(1)
	}
	// The connection's close and its qlog's last events reach the file before exit.
	time.Sleep(100 * time.Millisecond)
	return nil
}

// moduleVersion is the quic-go version this binary was built with, as go.mod pins it.
func moduleVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, m := range info.Deps {
			if m.Path == "github.com/quic-go/quic-go" {
				return m.Version
			}
		}
	}
	return "unknown"
}
