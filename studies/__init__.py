"""What is measured: job grids and figure lists (figures, limits), benchmark tables (benchmark, scaling),
the privacy audits (audit: trained canaries; audit_mechanism: crafted updates), the DP-BART study
(dp_bart), detector quality (detectors) and the collection of Hydra sweeps (collect). Each study is a
library of functions the commands in experiments/ call; none parses a command line."""
