#include "server/forced_tool.h"

namespace lily {

using json = nlohmann::json;

std::shared_ptr<const JsonSchema> forced_call_schema(const nlohmann::ordered_json& tools) {
  json alts = json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const auto& f = tools[i]["function"];
    const std::string name = f["name"].get<std::string>();
    json params = f.contains("parameters") && !f["parameters"].is_null() ? json::parse(f["parameters"].dump())
                                                                          : json{{"type", "object"}};
    json call = {{"type", "object"},
                 {"properties", {{"name", {{"const", name}}}, {"arguments", params}}},
                 {"required", {"name", "arguments"}},
                 {"additionalProperties", false}};
    // $refs inside a tool's parameters point at its own $defs: keep them resolvable from the root.
    if (params.is_object())
      for (const char* defs : {"$defs", "definitions"})
        if (params.contains(defs)) {
          if (tools.size() > 1)
            throw bad_request("tool '" + name + "': parameters with " + defs +
                                  " are supported only when this tool is the one forced (a named tool_choice)",
                              "tools");
          call[defs] = params[defs];
          params.erase(defs);
          call["properties"]["arguments"] = params;
        }
    alts.push_back(std::move(call));
  }
  const json schema = alts.size() == 1 ? alts[0] : json{{"anyOf", alts}};
  try {
    return JsonSchema::compile(schema);
  } catch (const SchemaError& e) {
    throw bad_request(std::string("a forced tool call is constrained to the tool's parameters schema, which this server "
                                  "cannot enforce: ") + e.what(),
                      "tools");
  }
}

void constrain_forced_tool(GenJob& job, const ChatRequest& r, const nlohmann::ordered_json& tools, bool thinking_open) {
  if (r.tool_choice != "required" && r.tool_choice != "function") return;
  job.json_schema = forced_call_schema(tools);
  job.forced_text = std::string(thinking_open ? "\n</think>\n\n" : "") + "<tool_call>\n";
  job.json_object = true;
  job.json_after_forced = true;
  job.json_suffix = "\n</tool_call>";
}

}  // namespace lily
