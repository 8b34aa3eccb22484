// The CDI directory the claims' specs go to (--cdi-dir, /var/run/cdi): made if missing, and
// trusted only when nobody but the driver's user (or root, who owns /var/run/cdi) can write
// it. Whoever could write it could replace or remove a claim's spec, whose containers would
// then run with another tenant's edits or none; the specs' own mode (claim_cdi.h) keeps them
// from being read.
//
// Checks and creates the directory; never reads or writes the specs in it.
#pragma once

#include <string>

namespace cuslice::dra {

// Creates `dir` (mode 0755, its parents as the umask has them) when missing; "" when it is a
// directory owned by root or the effective uid that neither group nor others may write, else
// why not (a sentence naming --cdi-dir).
std::string prepare_cdi_dir(const std::string& dir);

}  // namespace cuslice::dra
