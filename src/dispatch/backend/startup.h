// Start-up of the backend: the knobs, the runtime, the engine, fork safety,
// and the mode switch.
#pragma once

#include <string>

#include "kiln/knobs.h"
#include "kiln/log.h"  // every backend file logs

namespace kiln::dispatch {

// Parses the knobs, starts the runtime and configures the engine. Throws
// KnobError (a bad knob) or std::invalid_argument (an unwritable
// KILN_DUMP_DIR): the Python module's _init() calls it, so the error
// surfaces at import.
void initialize();
bool is_initialized();
const Settings& settings();

// Shows the engine's new warnings (engine::take_warnings) as Python
// warnings, at the line that met them.
void warn_about_the_engine();

// Switches KILN_MODE at run time (kiln.set_mode): flushes what every device
// recorded first, so nothing recorded under one mode is left behind.
void set_lazy_mode(bool lazy);

// Set once in a forked child: the device's worker threads did not survive.
bool in_bad_fork();

}  // namespace kiln::dispatch
