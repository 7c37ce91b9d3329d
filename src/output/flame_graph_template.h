// The flame graph page template, embedded at build time from flame_graph_template.html.
#pragma once

namespace ember {

// Placeholders: {{TITLE}} (HTML-escaped text) and {{DATA}} (FlameGraph::ToJson()).
extern const char kFlameGraphTemplate[];

}  // namespace ember
