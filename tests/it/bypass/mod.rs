mod fields;
mod identity;
mod paths;
mod protocols;
