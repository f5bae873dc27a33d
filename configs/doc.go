// Package configs holds vigil's configuration: the YAML schema, its
// defaults, validation and loading.
//
// Loading runs in three steps, in this order: defaults first, then the YAML
// is decoded over them (unknown keys are errors), then every section
// validates itself. Every error names the key path and the line it came
// from, e.g. "watchdog.hang_after (line 12): must be > interval", so an
// operator at 3 a.m. can go straight to the mistake.
//
// Secrets (the engine API key, the Slack token, a webhook URL) never appear
// inline: they come from a *_file or an *_env key, and are held in the
// Secret type, which never prints its value.
package configs
