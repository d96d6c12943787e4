mod bounds;
mod cli;
mod consistency;
mod contrib;
mod image;
mod loading;
