// `kilnd cache-export` and `kilnd cache-import`: a cache directory written
// to, or filled from, a cache archive (cache/cache_archive.h), by the
// daemon's own binary, so the archive's entries are checked and sealed by
// the same code and compiler version that will use them. `kiln cache
// export|import` run these.
#pragma once

#include <string_view>

namespace kiln::server {

// Whether argv[1] names one of these commands.
bool IsCacheArchiveCommand(std::string_view arg);

// Runs the command in argv[1] with the flags after it; the exit code: 0
// done, 1 failed (or records refused), 2 bad flags.
int RunCacheArchiveCommand(int argc, char** argv);

}  // namespace kiln::server
