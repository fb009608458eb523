package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/baton-proxy/baton/internal/config"
	"github.com/baton-proxy/baton/ipc"
	"github.com/baton-proxy/baton/supervisor"
	"github.com/urfave/cli/v2"
)

// controlSocket returns the socket a CLI command talks to: --socket, else
// the config's, else the default.
func controlSocket(c *cli.Context) (string, error) {
	if s := c.String("socket"); s != "" {
		return s, nil
	}
	if path := c.String("config"); path != "" {
		cfg, err := config.Load(path)
		if err != nil {
			return "", err
		}
		return cfg.ControlSocket, nil
	}
	return config.DefaultControlSocket(), nil
}

func call(c *cli.Context, command string, timeout time.Duration) (*ipc.Response, error) {
	return callRequest(c, ipc.Request{Command: command}, timeout)
}

func callRequest(c *cli.Context, req ipc.Request, timeout time.Duration) (*ipc.Response, error) {
	path, err := controlSocket(c)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(c.Context, timeout)
	defer cancel()
	return ipc.Call(ctx, path, req)
}

// handoffResult decodes a reply that carries a handoff; a refused or
// failed command is an error with its reason.
func handoffResult(resp *ipc.Response) (supervisor.Handoff, error) {
	var h supervisor.Handoff
	if len(resp.Result) > 0 {
		if err := json.Unmarshal(resp.Result, &h); err != nil {
			return h, err
		}
	}
	if !resp.OK {
		return h, errors.New(resp.Error)
	}
	return h, nil
}

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "show the supervisor, listeners, generations, workers and recent handoffs",
		Flags: []cli.Flag{
			configFlag(), socketFlag(),
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: "table", Usage: "table or json"},
			&cli.BoolFlag{Name: "watch", Aliases: []string{"w"}, Usage: "redraw every second (the table) until interrupted"},
		},
		Action: func(c *cli.Context) error {
			format := c.String("output")
			if format != "table" && format != "json" {
				return fmt.Errorf("status: -o %q: want table or json", format)
			}
			if c.Bool("watch") {
				if format != "table" {
					return errors.New("status: --watch draws the table; for JSON, poll -o json")
				}
				return watchStatus(c, os.Stdout)
			}
			resp, err := call(c, supervisor.CommandStatus, 10*time.Second)
			if err != nil {
				return err
			}
			if !resp.OK {
				return errors.New(resp.Error)
			}
			if format == "json" {
				var v any
				if err := json.Unmarshal(resp.Result, &v); err != nil {
					return err
				}
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(v)
			}
			st, err := decodeStatus(resp)
			if err != nil {
				return err
			}
			return printStatus(os.Stdout, st, time.Now())
		},
	}
}

// fetchStatus asks the supervisor for its status.
func fetchStatus(c *cli.Context, timeout time.Duration) (*supervisor.Status, error) {
	resp, err := call(c, supervisor.CommandStatus, timeout)
	if err != nil {
		return nil, err
	}
	return decodeStatus(resp)
}

// decodeStatus is the status a control response carries, or its error.
func decodeStatus(resp *ipc.Response) (*supervisor.Status, error) {
	if !resp.OK {
		return nil, errors.New(resp.Error)
	}
	var st supervisor.Status
	if err := json.Unmarshal(resp.Result, &st); err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	return &st, nil
}

// watchStatus redraws the status table every second, the screen cleared,
// until SIGINT or SIGTERM; a supervisor that does not answer is said, and
// asked again.
func watchStatus(c *cli.Context, out io.Writer) error {
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		var b bytes.Buffer
		b.WriteString("\x1b[H\x1b[2J") // home, clear
		if st, err := fetchStatus(c, 5*time.Second); err != nil {
			fmt.Fprintf(&b, "baton status: %v\n", err)
		} else {
			printStatus(&b, st, time.Now())
		}
		fmt.Fprintf(&b, "\n(every second; Ctrl-C ends)\n")
		if _, err := out.Write(b.Bytes()); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

func reloadCommand() *cli.Command {
	return &cli.Command{
		Name:  "reload",
		Usage: "start a new generation from the config and binary on disk, and wait for the handoff",
		Description: `Exits 0 once the new generation is ready and the old one drains; exits 1
with the reason when the config was refused or the new generation failed
(the old one keeps serving).

With --canary PERCENT the new generation starts beside the active one and
takes about PERCENT of the new connections (exactly, where BPF steers the
listeners); connections already open stay where they are. It exits 0 once
the canary serves. baton promote or baton abort ends it, or the config's
canary section does (canary.duration). A reload during a canary is refused.`,
		Flags: []cli.Flag{
			configFlag(), socketFlag(),
			&cli.DurationFlag{Name: "timeout", Value: 5 * time.Minute, Usage: "how long to wait for the handoff"},
			&cli.IntFlag{Name: "canary", Usage: "start the new generation as a canary taking `PERCENT` (1-99) of new connections"},
		},
		Action: func(c *cli.Context) error {
			pct := c.Int("canary")
			if c.IsSet("canary") && (pct < 1 || pct > 99) {
				return fmt.Errorf("reload: --canary %d: a canary takes 1 to 99 percent", pct)
			}
			resp, err := callRequest(c, ipc.Request{Command: supervisor.CommandReload, Canary: pct}, c.Duration("timeout"))
			if err != nil {
				return err
			}
			h, err := handoffResult(resp)
			if err != nil {
				return err
			}
			if pct > 0 {
				fmt.Printf("canary serving: generation %d takes %d%% of new connections beside generation %d (ready in %dms); baton promote or baton abort to end it\n",
					h.To, pct, h.From, h.ReadyMs)
				return nil
			}
			fmt.Printf("reload ok: generation %d -> %d, ready in %dms (spawn %dms); generation %d drains\n",
				h.From, h.To, h.ReadyMs, h.SpawnMs, h.From)
			return nil
		},
	}
}

func verdictCommand(name string) *cli.Command {
	usage := map[string]string{
		supervisor.CommandPromote: "make the running canary the active generation; the old one drains",
		supervisor.CommandAbort:   "end the running canary: it drains, and the active generation takes every new connection again",
	}[name]
	return &cli.Command{
		Name:  name,
		Usage: usage,
		Flags: []cli.Flag{
			configFlag(), socketFlag(),
			&cli.DurationFlag{Name: "timeout", Value: time.Minute, Usage: "how long to wait"},
		},
		Action: func(c *cli.Context) error {
			resp, err := call(c, name, c.Duration("timeout"))
			if err != nil {
				return err
			}
			h, err := handoffResult(resp)
			if err != nil {
				return err
			}
			if name == supervisor.CommandPromote {
				fmt.Printf("promoted: generation %d is active; generation %d drains\n", h.To, h.From)
			} else {
				fmt.Printf("aborted: canary generation %d drains; generation %d takes every new connection\n", h.To, h.From)
			}
			return nil
		},
	}
}

func upgradeCommand() *cli.Command {
	return &cli.Command{
		Name:  "upgrade",
		Usage: "replace the supervisor itself with the binary on disk, keeping every socket; wait for it",
		Description: `Starts a new supervisor process, which inherits the listening sockets and
the control socket and starts its own workers; once they are ready the old
supervisor drains its workers and exits. Exits 1 with the reason if the
new supervisor failed (the old one goes on).`,
		Flags: []cli.Flag{
			configFlag(), socketFlag(),
			&cli.DurationFlag{Name: "timeout", Value: 5 * time.Minute, Usage: "how long to wait"},
		},
		Action: func(c *cli.Context) error {
			resp, err := call(c, supervisor.CommandUpgrade, c.Duration("timeout"))
			if err != nil {
				return err
			}
			if !resp.OK {
				return errors.New(resp.Error)
			}
			fmt.Println("upgrade ok: the new supervisor serves; the old one drains")
			return nil
		},
	}
}

func stopCommand() *cli.Command {
	return &cli.Command{
		Name:  "stop",
		Usage: "drain every worker and stop the supervisor; wait until it has",
		Flags: []cli.Flag{
			configFlag(), socketFlag(),
			&cli.DurationFlag{Name: "timeout", Value: 5 * time.Minute, Usage: "how long to wait"},
		},
		Action: func(c *cli.Context) error {
			resp, err := call(c, supervisor.CommandStop, c.Duration("timeout"))
			if err != nil {
				return err
			}
			if !resp.OK {
				return errors.New(resp.Error)
			}
			fmt.Println("stopped")
			return nil
		},
	}
}

func checkCommand() *cli.Command {
	return &cli.Command{
		Name:  "check",
		Usage: "validate a config file without running it",
		Flags: []cli.Flag{
			configFlag(),
			&cli.BoolFlag{Name: "offline", Usage: "skip the checks that need the machine it will run on (a reachable Kubernetes API server, the user and group): for CI"},
		},
		Action: func(c *cli.Context) error {
			path := c.String("config")
			if path == "" {
				return errors.New("check: --config FILE is required")
			}
			load := config.Load
			if c.Bool("offline") {
				load = config.LoadOffline
			}
			cfg, err := load(path)
			if err != nil {
				return err
			}
			if !c.Bool("offline") && cfg.User != "" {
				if _, _, err := lookupUser(cfg.User); err != nil {
					return err
				}
				if cfg.Group != "" {
					if _, err := lookupGroup(cfg.Group); err != nil {
						return err
					}
				}
			}
			for _, w := range cfg.Warnings {
				fmt.Println("warning:", w)
			}
			// nginx -t's way: the file, that it is valid, what it holds.
			fmt.Printf("baton: the configuration file %s is valid (config ok): %d listeners, %d backends, %d routes, %d workers",
				path, len(cfg.Listeners), len(cfg.Backends), len(cfg.Routes), cfg.Workers)
			if g := cfg.Gateway; g != nil {
				fmt.Printf("; the Gateway API for GatewayClasses of %s, addresses from %s", g.ControllerName, strings.Join(g.Addresses, ", "))
			}
			fmt.Println()
			return nil
		},
	}
}

func configCommand() *cli.Command {
	return &cli.Command{
		Name:  "config",
		Usage: "about the config file",
		Subcommands: []*cli.Command{{
			Name:  "schema",
			Usage: "print the config file's JSON Schema (for editors: yaml-language-server's $schema modeline)",
			Action: func(*cli.Context) error {
				_, err := os.Stdout.Write(config.SchemaJSON)
				return err
			},
		}},
	}
}

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the version",
		Action: func(*cli.Context) error {
			fmt.Println("baton", version)
			return nil
		},
	}
}
