// Loading a job file: YAML text + dotted overrides -> a validated struct.
//
// file -> YAML::Load -> ApplyOverrides -> Walk(schema) -> struct + errors
//
// Every problem is collected (never only the first), each naming the file,
// line, column and dotted key. Nothing here throws or exits.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "config/schema.h"

namespace rlforge::config {

struct LoadInput {
  std::string yaml_text;
  std::string file;                    // shown in messages; "" means the text came from elsewhere
  std::vector<std::string> overrides;  // "trainer.lr=3e-4"
  // Checks of the whole struct beyond the schema's own, run after them with the same context
  // (every error names file, line and key): what only a higher layer knows, which it passes
  // down here (a reward's regex, the env registry, files on this host; cli/setup_checks.h).
  std::vector<std::function<void(const void* obj, CheckContext& ctx)>> checks;
  // Where to put what loads but should change (a renamed section's old name); may be null.
  std::vector<ConfigError>* warnings = nullptr;
};

// Fills `obj` (a default-constructed struct of the schema's type) and returns
// the problems found, in file order, then overrides.
std::vector<ConfigError> LoadInto(const Schema& schema, void* obj, const LoadInput& input);

// Reads `path` and calls LoadInto (with `checks`, as LoadInput's); a missing or unreadable file
// is one error.
std::vector<ConfigError> LoadFileInto(
    const Schema& schema, void* obj, const std::string& path,
    const std::vector<std::string>& overrides,
    std::vector<std::function<void(const void* obj, CheckContext& ctx)>> checks = {},
    std::vector<ConfigError>* warnings = nullptr);

// The full resolved tree (every key, defaults included), and as YAML text.
YAML::Node Dump(const Schema& schema, const void* obj);
std::string DumpYaml(const Schema& schema, const void* obj);

// Markdown reference of every key: type, default (from `defaults`) and doc.
std::string MarkdownReference(const Schema& schema, const void* defaults);

// Joins errors one per line, for printing.
std::string FormatErrors(const std::vector<ConfigError>& errors);
// Joins warnings one per line ("warning: file:line:col: key: message"), for printing.
std::string FormatWarnings(const std::vector<ConfigError>& warnings);

}  // namespace rlforge::config
