#!/bin/sh
# The long fault campaigns (`make soak`), each a longer run of a bounded test that
# `make test` runs too:
#   1. the kill campaign (crates/it/tests/it/campaign.rs): CSX_CAMPAIGN_POINTS kill -9
#      points (default 1000) of writers and daemon, half with simulated power loss,
#      every acknowledged byte checked after each;
#   2. the mount kill campaign (crates/it/tests/it/mountcampaign.rs):
#      CSX_MOUNT_CAMPAIGN_POINTS SIGKILLs (default 1000) of a FUSE mount under writers
#      (close, fsync, rename, unlink), a third with the daemon too, half with power loss;
#   3. 64 hostile clients (crates/server/tests/hostile.rs) for CSX_HOSTILE_SECONDS
#      (default 600) with the daemon's RSS sampled against its bound;
#   4. the 32-client soak with kills (crates/server/tests/soak.rs) for CSX_SOAK_SECONDS
#      (default 600).
# Release builds; each prints its counts (kill points, RSS peak and bound) at the end.
set -eu
CARGO=${CARGO:-cargo}
export CSX_CAMPAIGN_POINTS="${CSX_CAMPAIGN_POINTS:-1000}"
export CSX_MOUNT_CAMPAIGN_POINTS="${CSX_MOUNT_CAMPAIGN_POINTS:-1000}"
export CSX_HOSTILE_SECONDS="${CSX_HOSTILE_SECONDS:-600}"
export CSX_SOAK_SECONDS="${CSX_SOAK_SECONDS:-600}"
echo "soak: kill campaign, $CSX_CAMPAIGN_POINTS kill points"
$CARGO test --release -p csx-it campaign::kill_campaign -- --nocapture
echo "soak: mount kill campaign, $CSX_MOUNT_CAMPAIGN_POINTS kill points"
$CARGO test --release -p csx-it mount_kill_campaign -- --nocapture
echo "soak: 64 hostile clients for $CSX_HOSTILE_SECONDS s"
$CARGO test --release -p csx-server --test hostile -- --nocapture
echo "soak: 32 clients with kills for $CSX_SOAK_SECONDS s"
$CARGO test --release -p csx-server --test soak -- --nocapture
