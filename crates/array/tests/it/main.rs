//! csx-array's integration suite: arrays of embedded members and of tcp daemons served
//! in-process on loopback.

mod common;
mod d2d;
mod files;
mod lambda;
mod locks;
mod sort;
