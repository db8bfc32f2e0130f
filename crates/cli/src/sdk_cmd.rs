//! `csx sdk`: the C SDK's generated header, `csx.h`.

use anyhow::Context as _;

use crate::{exit, GlobalArgs};

/// The C SDK: print the header programs include.
///
/// Examples:
///   csx sdk header > sdk/include/csx.h            # the built-in device's functions
///   csx --device ./dev sdk header > csx.h         # a given device's functions
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct SdkArgs {
    #[command(flatten)]
    pub dev: crate::connect::DeviceArg,
    #[command(subcommand)]
    command: SdkCommand,
}

#[derive(Debug, clap::Subcommand)]
enum SdkCommand {
    /// Print `csx.h`: entry convention, error codes and every device function.
    ///
    /// With --device the functions are that device's; without, the built-in table.
    Header,
}

pub fn run(args: SdkArgs, global: &GlobalArgs) -> anyhow::Result<u8> {
    match args.command {
        SdkCommand::Header => {
            let header = match &global.device {
                Some(_) => {
                    let dev = crate::connect::open(global)?;
                    let functions = dev.functions().context("listing the device's functions")?;
                    csx_workloads::sdk::header(&functions)
                }
                None => csx_workloads::sdk::builtin_header(),
            };
            print!("{header}");
            Ok(exit::SUCCESS)
        }
    }
}
