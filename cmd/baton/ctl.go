package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
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
	path, err := controlSocket(c)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(c.Context, timeout)
	defer cancel()
	return ipc.Call(ctx, path, ipc.Request{Command: command})
}

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "show the supervisor, listeners, generations, workers and recent handoffs",
		Flags: []cli.Flag{
			configFlag(), socketFlag(),
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: "table", Usage: "table or json"},
		},
		Action: func(c *cli.Context) error {
			format := c.String("output")
			if format != "table" && format != "json" {
				return fmt.Errorf("status: -o %q: want table or json", format)
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
			var st supervisor.Status
			if err := json.Unmarshal(resp.Result, &st); err != nil {
				return err
			}
			return printStatus(os.Stdout, &st, time.Now())
		},
	}
}

func reloadCommand() *cli.Command {
	return &cli.Command{
		Name:  "reload",
		Usage: "start a new generation from the config and binary on disk, and wait for the handoff",
		Description: `Exits 0 once the new generation is ready and the old one drains; exits 1
with the reason when the config was refused or the new generation failed
(the old one keeps serving).`,
		Flags: []cli.Flag{
			configFlag(), socketFlag(),
			&cli.DurationFlag{Name: "timeout", Value: 5 * time.Minute, Usage: "how long to wait for the handoff"},
		},
		Action: func(c *cli.Context) error {
			resp, err := call(c, supervisor.CommandReload, c.Duration("timeout"))
			if err != nil {
				return err
			}
			var h supervisor.Handoff
			if len(resp.Result) > 0 {
				if err := json.Unmarshal(resp.Result, &h); err != nil {
					return err
				}
			}
			if !resp.OK {
				return errors.New(resp.Error)
			}
			fmt.Printf("reload ok: generation %d -> %d, ready in %dms (spawn %dms); generation %d drains\n",
				h.From, h.To, h.ReadyMs, h.SpawnMs, h.From)
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
			fmt.Printf("config ok: %d listeners, %d backends, %d routes, %d workers\n",
				len(cfg.Listeners), len(cfg.Backends), len(cfg.Routes), cfg.Workers)
			return nil
		},
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
