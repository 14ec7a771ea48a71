// UTF-8 validity, for the text log formatter: a client's bytes go into log
// lines, and what is not UTF-8 is escaped rather than copied. (The JSON
// formatter's library checks UTF-8 itself.)
#pragma once

#include <cstddef>

#include "absl/strings/string_view.h"

namespace kiln::server {

// The length of the valid UTF-8 sequence starting at s[i], or 0 when the
// bytes there are not one (overlong forms, surrogates and values past
// U+10FFFF included). s[i] is a byte >= 0x80; ASCII is the caller's.
size_t Utf8SequenceLength(absl::string_view s, size_t i);

}  // namespace kiln::server
