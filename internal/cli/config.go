package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/drover-run/drover/internal/clicore"
)

// EnvConfig names the environment variable that sets --config.
const EnvConfig = "DROVER_CONFIG"

// Settings come from three places, in this order of precedence: the
// command line, DROVER_* environment variables, and the YAML file of
// --config, whose keys are the flags' long names. A key or variable
// applies to every command that has a flag of its name.

// Where a flag's value came from, in increasing precedence.
const (
	fromDefault = iota
	fromFile
	fromEnv
	fromFlag
)

// envName is the environment variable of flag name: DROVER_ and the name
// in upper case with "_" for "-"; --db keeps its DROVER_DATABASE_URL.
func envName(flag string) string {
	if flag == "db" {
		return EnvDatabaseURL
	}
	return "DROVER_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// notSettable are flags no file or variable sets: cobra's own, --config
// itself.
var notSettable = map[string]bool{"help": true, "version": true, "config": true}

// consumeEnv are the variables "drover queue consume --exec" sets for its
// command: they describe the message being handled, so a drover the
// command runs must not take them for --queue, --session, --message-id,
// --end-of-sequence or --seq (a publish would reuse the message's ID and
// be dropped as a duplicate).
var consumeEnv = map[string]bool{"DROVER_QUEUE": true, "DROVER_SESSION": true, "DROVER_SEQ": true,
	"DROVER_MESSAGE_ID": true, "DROVER_DELIVERY_COUNT": true, "DROVER_END_OF_SEQUENCE": true}

// ownsDatabase reports whether cmd takes --db and --schema only from its
// command line: the demos and benchmarks run on a scratch store unless
// told otherwise, and must not wipe the one of the environment.
func ownsDatabase(cmd *cobra.Command, flag string) bool {
	if flag != "db" && flag != "schema" {
		return false
	}
	p := cmd.CommandPath()
	return strings.HasPrefix(p, "drover demo") || strings.HasPrefix(p, "drover bench")
}

// configValue is one key of the config file.
type configValue struct {
	values []string // one for a scalar, each item of a sequence
	line   int
}

// resolveSettings fills the flags of cmd not given on the command line from
// the environment, then from the config file. It runs once per invocation.
func (e *env) resolveSettings(cmd *cobra.Command) error {
	if e.origin != nil {
		return nil
	}
	e.origin = map[string]int{}
	fl := cmd.Flags()
	fl.VisitAll(func(f *pflag.Flag) {
		if f.Changed {
			e.origin[f.Name] = fromFlag
		}
	})
	path := e.configPath
	if e.origin["config"] != fromFlag {
		path = e.Getenv(EnvConfig)
	}
	var file map[string]configValue
	if path != "" {
		var err error
		if file, err = loadConfig(path, cmd.Root()); err != nil {
			return err
		}
	}
	var errs []error
	fl.VisitAll(func(f *pflag.Flag) {
		if f.Changed || notSettable[f.Name] || ownsDatabase(cmd, f.Name) {
			return
		}
		if v := e.Getenv(envName(f.Name)); v != "" && !consumeEnv[envName(f.Name)] {
			if err := setFlag(fl, f, []string{v}); err != nil {
				errs = append(errs, clicore.Usagef("$%s: %w", envName(f.Name), err))
			}
			e.origin[f.Name] = fromEnv
			return
		}
		if v, ok := file[f.Name]; ok {
			if err := setFlag(fl, f, v.values); err != nil {
				errs = append(errs, clicore.Usagef("config file %s, line %d: %s: %w", path, v.line, f.Name, err))
			}
			e.origin[f.Name] = fromFile
		}
	})
	return errors.Join(errs...)
}

// setFlag sets f as the command line would, so that the commands' checks
// of Changed see the value. A list sets a repeatable flag's items.
func setFlag(fl *pflag.FlagSet, f *pflag.Flag, values []string) error {
	if sv, ok := f.Value.(pflag.SliceValue); ok {
		if err := sv.Replace(values); err != nil {
			return err
		}
		f.Changed = true
		return nil
	}
	if len(values) != 1 {
		return fmt.Errorf("want one value, not a list of %d", len(values))
	}
	return fl.Set(f.Name, values[0])
}

// onCommandLine reports whether flag name was given on the command line,
// rather than by a variable or the config file.
func (e *env) onCommandLine(cmd *cobra.Command, name string) bool {
	return cmd.Flags().Changed(name) && e.origin[name] == fromFlag
}

// flagNames are the long names of every flag of every command under root.
func flagNames(root *cobra.Command) map[string]bool {
	names := map[string]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) { names[f.Name] = true })
		c.PersistentFlags().VisitAll(func(f *pflag.Flag) { names[f.Name] = true })
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	for n := range notSettable {
		delete(names, n)
	}
	return names
}

// loadConfig reads the config file at path: one YAML mapping from flag
// names to a scalar or a list of scalars. A key that is no flag of any
// command is an error naming it, the file and the line.
func loadConfig(path string, root *cobra.Command) (map[string]configValue, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, clicore.Usage(fmt.Errorf("config file: %w", err))
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(src))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil // an empty file sets nothing
		}
		return nil, clicore.Usagef("config file %s: %w", path, err)
	}
	var more yaml.Node
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		return nil, clicore.Usagef("config file %s: want one YAML document", path)
	}
	m := &doc
	if m.Kind == yaml.DocumentNode && len(m.Content) == 1 {
		m = m.Content[0]
	}
	if m.Kind != yaml.MappingNode {
		return nil, clicore.Usagef("config file %s, line %d: want a mapping of flag names to values", path, m.Line)
	}
	known := flagNames(root)
	out := map[string]configValue{}
	var unknown []string
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		name := k.Value
		switch {
		case k.Kind != yaml.ScalarNode:
			return nil, clicore.Usagef("config file %s, line %d: a key must be a flag name", path, k.Line)
		case !known[name]:
			unknown = append(unknown, fmt.Sprintf("%q (line %d)", name, k.Line))
			continue
		}
		if _, dup := out[name]; dup {
			return nil, clicore.Usagef("config file %s, line %d: key %q given twice", path, k.Line, name)
		}
		cv := configValue{line: k.Line}
		switch {
		case v.Kind == yaml.ScalarNode && v.Tag == "!!null":
			return nil, clicore.Usagef("config file %s, line %d: %s has no value", path, k.Line, name)
		case v.Kind == yaml.ScalarNode:
			cv.values = []string{v.Value}
		case v.Kind == yaml.SequenceNode:
			for _, item := range v.Content {
				if item.Kind != yaml.ScalarNode {
					return nil, clicore.Usagef("config file %s, line %d: %s: a list holds values, not lists or mappings", path, item.Line, name)
				}
				cv.values = append(cv.values, item.Value)
			}
		default:
			return nil, clicore.Usagef("config file %s, line %d: %s: want a value or a list of values", path, v.Line, name)
		}
		out[name] = cv
	}
	if len(unknown) > 0 {
		return nil, clicore.Usagef("config file %s: unknown key %s: not a flag of any drover command", path, strings.Join(unknown, ", "))
	}
	return out, nil
}
