package rlmatch

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The raw* types mirror the YAML as written. Decoding is strict: a field
// that is not listed here is an error, at the level where it was written.
// ProtoFiles encodes them too: omitempty leaves out what is not set, so
// that the file reads back as it was built.

type rawFile struct {
	Domain      string          `yaml:"domain,omitempty"`
	Descriptors []rawDescriptor `yaml:"descriptors,omitempty"`

	// Extensions: defaults for every descriptor of the domain.
	Algorithm   string `yaml:"algorithm,omitempty"`
	Burst       burst  `yaml:"burst,omitempty"`
	FailureMode string `yaml:"failure_mode,omitempty"`
	// CountOverLimit: the domain's hits count even past their limits.
	CountOverLimit *bool `yaml:"count_over_limit,omitempty"`
}

type rawDescriptor struct {
	Key            string          `yaml:"key,omitempty"`
	Value          string          `yaml:"value,omitempty"`
	RateLimit      *rawLimit       `yaml:"rate_limit,omitempty"`
	Descriptors    []rawDescriptor `yaml:"descriptors,omitempty"`
	ShadowMode     bool            `yaml:"shadow_mode,omitempty"`
	QuotaMode      bool            `yaml:"quota_mode,omitempty"`
	DetailedMetric bool            `yaml:"detailed_metric,omitempty"`
	ValueToMetric  bool            `yaml:"value_to_metric,omitempty"`
	ShareThreshold bool            `yaml:"share_threshold,omitempty"`
	Metadata       map[string]any  `yaml:"metadata,omitempty"`

	// Extensions.
	RateLimits  []rawLimit `yaml:"rate_limits,omitempty"`
	Algorithm   string     `yaml:"algorithm,omitempty"`
	Burst       burst      `yaml:"burst,omitempty"`
	FailureMode string     `yaml:"failure_mode,omitempty"`
}

type rawLimit struct {
	Unit            string           `yaml:"unit,omitempty"`
	RequestsPerUnit *requestsPerUnit `yaml:"requests_per_unit,omitempty"`
	Unlimited       bool             `yaml:"unlimited,omitempty"`
	Name            string           `yaml:"name,omitempty"`
	Replaces        []rawReplace     `yaml:"replaces,omitempty"`

	// Extensions.
	Window     string `yaml:"window,omitempty"`
	Algorithm  string `yaml:"algorithm,omitempty"`
	Burst      burst  `yaml:"burst,omitempty"`
	ShadowMode *bool  `yaml:"shadow_mode,omitempty"`
}

type rawReplace struct {
	Name string `yaml:"name,omitempty"`
}

// requestsPerUnit and burst are counts written as YAML numbers: an
// integer, or a float with no fraction (1e3). The decoder would truncate
// 0.5 to 0 unasked, which for requests_per_unit blocks every request.
type (
	requestsPerUnit int64
	burst           int64
)

// UnmarshalYAML decodes an integer, refusing a fraction.
func (n *requestsPerUnit) UnmarshalYAML(v *yaml.Node) error {
	return decodeWhole(v, "requests_per_unit", (*int64)(n))
}

// UnmarshalYAML decodes an integer, refusing a fraction.
func (n *burst) UnmarshalYAML(v *yaml.Node) error { return decodeWhole(v, "burst", (*int64)(n)) }

func decodeWhole(v *yaml.Node, field string, dst *int64) error {
	var n int64
	if err := v.Decode(&n); err != nil {
		return err
	}
	if v.ShortTag() == "!!float" {
		if f, err := strconv.ParseFloat(strings.ReplaceAll(v.Value, "_", ""), 64); err != nil || f != math.Trunc(f) {
			return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %s %s is not a whole number", v.Line, field, v.Value)}}
		}
	}
	*dst = n
	return nil
}

// yamlTypeNames turns the decoder's Go type names into the names a
// configuration author knows.
var yamlTypeNames = strings.NewReplacer(
	"type rlmatch.rawFile", "the top level",
	"type rlmatch.rawDescriptor", "a descriptor",
	"type rlmatch.rawLimit", "a rate limit",
	"type rlmatch.rawReplace", "a replaces entry",
	"rlmatch.rawFile", "a file",
	"rlmatch.rawDescriptor", "a descriptor",
	"rlmatch.rawLimit", "a rate limit",
	"rlmatch.rawReplace", "a replaces entry",
)

// decodeFile decodes one file strictly. It returns every decoding problem
// as its own error (without the file name), and ok false when the file
// could not be decoded at all or had problems.
func decodeFile(data []byte) (rawFile, []error) {
	var f rawFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	err := dec.Decode(&f)
	if errors.Is(err, io.EOF) {
		// An empty file: report it as a file without a domain.
		return f, nil
	}
	if err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			errs := make([]error, len(te.Errors))
			for i, msg := range te.Errors {
				errs[i] = errors.New(yamlTypeNames.Replace(msg))
			}
			return f, errs
		}
		return f, []error{fmt.Errorf("not valid YAML: %s", strings.TrimPrefix(err.Error(), "yaml: "))}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return f, []error{errors.New("holds more than one YAML document; put each domain in its own file")}
	}
	return f, nil
}
