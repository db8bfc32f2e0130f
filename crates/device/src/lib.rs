//! csx-device: the computational storage device runtime.

pub mod filestore;
pub mod nvm;
