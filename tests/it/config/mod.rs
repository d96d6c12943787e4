mod bounds;
mod charge;
mod cli;
mod consistency;
mod contrib;
mod docs;
mod image;
mod loading;
