// Compiled only to produce the shared libtorch precompiled header.
