//! Prints the conformance matrix of every backend compiled in; exits 1 if any check failed.

fn main() {
    let rows = devbuf::matrix::run();
    print!("{}", devbuf::matrix::Table(&rows));
    if rows.iter().any(devbuf::matrix::Row::failed) {
        std::process::exit(1);
    }
}
