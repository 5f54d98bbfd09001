//! Reads `terraform output -json` on stdin and prints the network keys of
//! the `[provider-config.ec2]` table:
//!
//!     terraform -chdir=terraform output -json | cargo run -p lazyinit-ec2 --example terraform-config

use std::io::Read;

fn main() {
    let mut json = String::new();
    if let Err(e) = std::io::stdin().read_to_string(&mut json) {
        eprintln!("error: cannot read stdin: {e}");
        std::process::exit(2);
    }
    match lazyinit_ec2::config::from_terraform_outputs(&json) {
        Ok(table) => print!("{table}"),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    }
}
