package main

import (
	"github.com/baton-proxy/baton/supervisor"
	"github.com/urfave/cli/v2"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func newApp() *cli.App {
	return &cli.App{
		Name:    "baton",
		Usage:   "hand listening sockets to generations of workers, dropping nothing",
		Version: version,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "log-format", Value: "auto", Usage: "console, json, or auto (console on a terminal)", EnvVars: []string{"BATON_LOG_FORMAT"}},
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error", EnvVars: []string{"BATON_LOG_LEVEL"}},
		},
		Commands: []*cli.Command{
			runCommand(),
			statusCommand(),
			reloadCommand(),
			verdictCommand(supervisor.CommandPromote),
			verdictCommand(supervisor.CommandAbort),
			upgradeCommand(),
			stopCommand(),
			checkCommand(),
			configCommand(),
			versionCommand(),
			workerCommand(),
		},
		HideHelpCommand: true,
	}
}

func configFlag() cli.Flag {
	return &cli.StringFlag{Name: "config", Aliases: []string{"c"}, Usage: "config `FILE`", EnvVars: []string{"BATON_CONFIG"}}
}

func socketFlag() cli.Flag {
	return &cli.StringFlag{Name: "socket", Usage: "control socket `PATH` (default: from --config, else the default path)"}
}
