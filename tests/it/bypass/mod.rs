mod fields;
mod paths;
mod protocols;
