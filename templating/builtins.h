// Internal: what templates can do to values — attribute and item access, operators, methods
// of str and dict, filters, tests and the global functions transformers provides. Each throws
// TemplateError without a place; the renderer adds the line and column of the expression.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "templating/lexer.h"
#include "templating/value.h"

namespace rlforge::templating::internal {

[[noreturn]] void Throw(std::string message);
// Throws the undefined value's message ("'x' is undefined") when `v` is undefined.
void CheckDefined(const Value& v);

// `obj.name`: a bound method of str or dict, else the dict entry (Python getattr, then item).
Value GetAttr(const Value& obj, const std::string& name);
// `obj[key]`: dict entry, list or str element (negative indexes count from the end).
Value GetItem(const Value& obj, const Value& key);
// `obj[start:stop:step]` on lists and strings; undefined parts are left out.
Value Slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
// Arithmetic (+ - * / // % **) and "~".
Value BinaryOp(const std::string& op, const Value& a, const Value& b);
bool Contains(const Value& container, const Value& item);
// What `for` walks: list items, dict keys, str characters; undefined is empty.
std::vector<Value> Iterate(const Value& v);

// args.positional[0] is the value filtered / tested.
Value ApplyFilter(const std::string& name, CallArgs& args);
bool ApplyTest(const std::string& name, CallArgs& args);

// Positional argument `index` or keyword `name`, else `fallback`.
Value Arg(const CallArgs& args, size_t index, const char* name, Value fallback = Value());

using Clock = std::function<std::chrono::system_clock::time_point()>;
// range, dict, namespace, raise_exception, strftime_now (local time from `now`).
Dict Globals(const Clock& now);

// Python's str.upper() / str.lower() (full Unicode case mappings).
std::string Upper(const std::string& s);
std::string Lower(const std::string& s);

}  // namespace rlforge::templating::internal
