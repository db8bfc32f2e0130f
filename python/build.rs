//! Records the Cargo profile and optimisation level `csx._native` is built with, so
//! the package can say which build it runs (`csx._native.BUILD_PROFILE`,
//! `BUILD_OPT_LEVEL`; the benchmarks print them beside their figures).

fn main() {
    // Cargo names the dev profile's build "debug" here; the package calls it "dev",
    // as Cargo.toml's [profile.dev] does.
    let profile = match std::env::var("PROFILE").as_deref() {
        Ok("debug") => "dev".to_string(),
        Ok(p) => p.to_string(),
        Err(_) => "unknown".to_string(),
    };
    let opt = std::env::var("OPT_LEVEL").unwrap_or_else(|_| "unknown".to_string());
    println!("cargo:rustc-env=CSX_BUILD_PROFILE={profile}");
    println!("cargo:rustc-env=CSX_BUILD_OPT_LEVEL={opt}");
    println!("cargo:rerun-if-changed=build.rs");
}
