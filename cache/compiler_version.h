// The version every cache key, artifact header and saved derived constant
// carries, and that kilnd reports: the release (KILN_RUNTIME_VERSION), a
// digest of the sources that decide what a compile produces
// (cache/source_digest.cmake) and the version of the oneDNN library loaded. An artifact holds the graph the passes made
// and the internal ops they used, so a daemon built from other sources
// must never take it for its own, even at the same release.
#pragma once

namespace kiln::cache {

// "<release>+<16 hex digits>-dnnl<major>.<minor>.<patch>", one word.
const char* CompilerVersion();

}  // namespace kiln::cache
