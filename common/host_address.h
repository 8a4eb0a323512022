// Host names and addresses: which ones only this machine reaches.
#pragma once

#include <string>

namespace rlforge {

// True for 127.0.0.0/8, ::1 and localhost (also bracketed, any case): an address that accepts
// connections from this machine only. The rule for the dashboard's token and the control
// plane's CURVE keys alike.
bool IsLoopbackHost(const std::string& host);

}  // namespace rlforge
